package faulttest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/tools/brokerctl"
	"github.com/acemq/acemq/tools/fencerun"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

func TestMain(m *testing.M) {
	fencerun.MaybeChild() // instance A of the fencing experiment
	goleak.VerifyTestMain(m)
}

// ctl runs rabbitmqctl with args (brokerctl: $ACEMQ_RABBITMQCTL when
// set), failing the test on error.
func ctl(t testing.TB, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := brokerctl.Run(ctx, args...); err != nil {
		t.Error(err)
	}
}

// askVar is the environment variable `make test-fault` sets: without it
// the fault tests skip, so that `go test ./...` never disturbs a broker
// other work is using.
const askVar = "ACEMQ_FAULT_TESTS"

// needCtl skips the test unless the fault tests were asked for, and when
// rabbitmqctl is missing, unless the broker is required.
func needCtl(t testing.TB) {
	t.Helper()
	if os.Getenv(askVar) != "1" {
		t.Skipf("the fault tests close every connection on the broker and stop its app: run them alone with `make test-fault` (or %s=1)", askVar)
	}
	if err := brokerctl.Available(); err != nil {
		if os.Getenv("ACEMQ_REQUIRE_BROKER") == "1" {
			t.Fatalf("fault tests need rabbitmqctl: %v", err)
		}
		t.Skipf("fault tests need rabbitmqctl to disturb the broker: %v", err)
	}
}

// load is a publish+consume run: publishers send unique IDs continuously
// while one consumer acks; it counts what was sent, confirmed, consumed.
type load struct {
	t  *testing.T
	tr *rabbitmq.Transport
	q  string

	mu        sync.Mutex
	confirmed map[string]bool
	consumed  map[string]int

	attempts, failures, staleAcks atomic.Int64
	healthDown, healthUpAfter     atomic.Bool

	stopPub   context.CancelFunc
	stopCons  context.CancelFunc
	pubWG     sync.WaitGroup
	consDone  chan error
	watchDone chan struct{}
}

func startLoad(t *testing.T, publishers int) *load {
	t.Helper()
	url := acemqtest.RabbitMQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := rabbitmq.Dial(ctx, url, rabbitmq.Config{MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	q := acemqtest.QueueName(t, "fault")
	if err := tr.Declare(ctx, transport.Queue{Name: q}); err != nil {
		t.Fatal(err)
	}
	acemqtest.DeleteQueuesAfter(t, url, q)
	l := &load{t: t, tr: tr, q: q, confirmed: map[string]bool{}, consumed: map[string]int{},
		consDone: make(chan error, 1), watchDone: make(chan struct{})}

	consCtx, stopCons := context.WithCancel(context.Background())
	l.stopCons = stopCons
	go func() {
		l.consDone <- tr.Consume(consCtx, q, 50, func(d transport.Delivery) {
			l.mu.Lock()
			l.consumed[d.MessageID]++ // handled: recorded before the ack
			l.mu.Unlock()
			if err := d.Ack(); err != nil {
				l.staleAcks.Add(1)
			}
		})
	}()

	pubCtx, stopPub := context.WithCancel(context.Background())
	l.stopPub = stopPub
	for g := range publishers {
		l.pubWG.Add(1)
		go func() {
			defer l.pubWG.Done()
			for i := 0; pubCtx.Err() == nil; i++ {
				id := fmt.Sprintf("p%d-%d", g, i)
				l.attempts.Add(1)
				ctx, cancel := context.WithTimeout(pubCtx, 20*time.Second)
				err := tr.Publish(ctx, transport.Message{RoutingKey: q, MessageID: id, Body: []byte(id)})
				cancel()
				if err != nil {
					l.failures.Add(1)
					continue
				}
				l.mu.Lock()
				l.confirmed[id] = true
				l.mu.Unlock()
			}
		}()
	}
	go func() {
		defer close(l.watchDone)
		for pubCtx.Err() == nil {
			err := tr.Health(context.Background())
			if err != nil {
				l.healthDown.Store(true)
			} else if l.healthDown.Load() {
				l.healthUpAfter.Store(true)
			}
			time.Sleep(25 * time.Millisecond)
		}
	}()
	return l
}

// finish stops publishing, waits for every confirmed message to be
// consumed, checks the run's promises and logs its counts.
func (l *load) finish() {
	t := l.t
	t.Helper()
	l.stopPub()
	l.pubWG.Wait()
	<-l.watchDone
	deadline := time.Now().Add(60 * time.Second)
	var missing []string
	for {
		missing = missing[:0]
		l.mu.Lock()
		for id := range l.confirmed {
			if l.consumed[id] == 0 {
				missing = append(missing, id)
			}
		}
		l.mu.Unlock()
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := l.tr.Health(context.Background()); err != nil {
		t.Errorf("Health at the end of the run: %v", err)
	}
	l.stopCons()
	if err := <-l.consDone; err != nil {
		t.Errorf("Consume returned %v", err)
	}
	if err := l.tr.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	dups, unconfirmedSeen := 0, 0
	for id, n := range l.consumed {
		dups += n - 1
		if !l.confirmed[id] {
			unconfirmedSeen++
		}
	}
	t.Logf("sent %d, confirmed %d, failed %d, consumed %d distinct (%d duplicates, %d never confirmed), stale acks %d",
		l.attempts.Load(), len(l.confirmed), l.failures.Load(), len(l.consumed), dups, unconfirmedSeen, l.staleAcks.Load())
	if len(missing) > 0 {
		t.Errorf("%d confirmed messages were never consumed, e.g. %q", len(missing), missing[:min(5, len(missing))])
	}
	if len(l.confirmed) == 0 {
		t.Error("nothing was confirmed")
	}
	if !l.healthDown.Load() || !l.healthUpAfter.Load() {
		t.Errorf("Health went down: %v, came back: %v; want both", l.healthDown.Load(), l.healthUpAfter.Load())
	}
}

package rabbitmq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// logBuffer is a slog destination safe for the transport's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// drainQueue takes every message of q with Get and counts each message ID.
func drainQueue(t *testing.T, tr *rabbitmq.Transport, q string) map[string]int {
	t.Helper()
	ids := map[string]int{}
	for {
		d, ok, err := tr.Get(ctxT(t), q)
		if err != nil {
			t.Fatalf("Get(%q): %v", q, err)
		}
		if !ok {
			return ids
		}
		ids[d.MessageID]++
		if err := d.Ack(); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
}

// TestPublishMissingExchangeFrom64Goroutines: 64 goroutines publish to a
// missing exchange at once, again and again, while 16 others publish to a
// good queue. Each publish to the missing exchange fails naming it; the
// check runs on a channel of its own, so the shared publishing channel is
// never closed: every good publish is confirmed, and the queue holds each
// exactly once (a closed channel would have sent its unconfirmed ones
// again).
func TestPublishMissingExchangeFrom64Goroutines(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	tr := dial(t, brokerURL(t), rabbitmq.Config{Logger: logs.logger()})
	q := queue(t, tr, "good", nil)
	missing := acemqtest.QueueName(t, "no-such-exchange")
	const bad, badEach, good, goodEach = 64, 10, 16, 100
	var wg sync.WaitGroup
	errs := make(chan error, bad*badEach+good*goodEach)
	start := make(chan struct{})
	for g := range bad {
		wg.Go(func() {
			<-start
			for i := range badEach {
				err := tr.Publish(ctxT(t), transport.Message{Exchange: missing, RoutingKey: "k", MessageID: fmt.Sprintf("bad-%d-%d", g, i)})
				if !errors.Is(err, transport.ErrNotFound) || !strings.Contains(err.Error(), missing) {
					errs <- fmt.Errorf("publish to the missing exchange = %v; want ErrNotFound naming it", err)
				}
			}
		})
	}
	for g := range good {
		wg.Go(func() {
			<-start
			for i := range goodEach {
				if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: fmt.Sprintf("good-%d-%d", g, i)}); err != nil {
					errs <- fmt.Errorf("good publish: %v", err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ids := drainQueue(t, tr, q)
	if len(ids) != good*goodEach {
		t.Errorf("the queue holds %d distinct messages; want %d", len(ids), good*goodEach)
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("message %s arrived %d times; want once (was the publishing channel closed?)", id, n)
		}
	}
	if strings.Contains(logs.String(), "closed the publishing channel") {
		t.Errorf("the broker closed the publishing channel:\n%s", logs.String())
	}
	if err := tr.Health(ctxT(t)); err != nil {
		t.Errorf("Health: %v", err)
	}
}

// TestPublishExchangeDeletedAfterItsCheck: an exchange deleted behind the
// transport's back (after its check was cached) makes the broker close the
// publishing channel on the next publish to it. That publish fails naming
// the exchange; the channel is reopened at once and the unconfirmed good
// publishes are sent again on it, so all of them are confirmed and
// arrive; the next publish to the deleted exchange is checked again and
// fails without closing the channel.
func TestPublishExchangeDeletedAfterItsCheck(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	url := brokerURL(t)
	tr := dial(t, url, rabbitmq.Config{Logger: logs.logger()})
	q := queue(t, tr, "survivor", nil)
	ex := acemqtest.QueueName(t, "doomed")
	t.Cleanup(func() { _ = deleteExchange(url, ex) })
	if err := tr.Declare(ctxT(t), transport.Exchange{Name: ex, Kind: "fanout"}, transport.Binding{Exchange: ex, Queue: q}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctxT(t), transport.Message{Exchange: ex, MessageID: "checked"}); err != nil {
		t.Fatalf("Publish to the exchange before its deletion: %v", err)
	}
	if err := deleteExchange(url, ex); err != nil {
		t.Fatal(err)
	}

	const good = 400
	var wg sync.WaitGroup
	goodErrs := make([]error, good)
	for i := range good {
		wg.Go(func() {
			goodErrs[i] = tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: fmt.Sprintf("good-%d", i)})
		})
		if i == good/2 {
			wg.Go(func() {
				err := tr.Publish(ctxT(t), transport.Message{Exchange: ex, MessageID: "after-deletion"})
				if !errors.Is(err, transport.ErrNotFound) || !strings.Contains(err.Error(), ex) {
					t.Errorf("publish to the deleted exchange = %v; want ErrNotFound naming it", err)
				}
			})
		}
	}
	wg.Wait()
	for i, err := range goodErrs {
		if err != nil {
			t.Errorf("good publish %d: %v", i, err)
		}
	}
	closes := strings.Count(logs.String(), "closed the publishing channel")
	if closes != 1 {
		t.Errorf("the publishing channel was closed %d times; want once, by the publish to the deleted exchange:\n%s", closes, logs.String())
	}
	// Checked again now, and refused without closing the channel.
	err := tr.Publish(ctxT(t), transport.Message{Exchange: ex, MessageID: "again"})
	if !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("second publish to the deleted exchange = %v; want ErrNotFound", err)
	}
	if n := strings.Count(logs.String(), "closed the publishing channel"); n != closes {
		t.Errorf("the second publish to the deleted exchange closed the channel again")
	}
	ids := drainQueue(t, tr, q)
	for i := range good {
		if ids[fmt.Sprintf("good-%d", i)] == 0 {
			t.Errorf("good-%d was confirmed but is not in the queue", i)
		}
	}
	if err := tr.Health(ctxT(t)); err != nil {
		t.Errorf("Health: %v", err)
	}
}

// TestPublishUnparseableAmongGood: a message the broker cannot parse (a NaN
// float in its headers, past the checks that refuse one) makes RabbitMQ
// close the whole connection. Sent among 1,000 good ones, it is in flight
// at two connection closures, the second time alone, and then fails with
// the broker's reason instead of being sent a third time; every good one
// is confirmed and in the queue.
func TestPublishUnparseableAmongGood(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	tr := dial(t, brokerURL(t), rabbitmq.Config{Logger: logs.logger()})
	q := queue(t, tr, "poisoned", nil)
	const n, poison = 1001, 500
	ms := make([]transport.Message, n)
	for i := range ms {
		ms[i] = transport.Message{RoutingKey: q, MessageID: fmt.Sprintf("m-%d", i), Body: make([]byte, 256)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := tr.PublishBatchPoisoned(ctx, ms, poison)
	for i, err := range errs {
		if i == poison {
			continue
		}
		if err != nil {
			t.Errorf("good message %d: %v", i, err)
		}
	}
	perr := errs[poison]
	var broker *amqp.Error
	if perr == nil || !errors.As(perr, &broker) || broker.Code != amqp.InternalError || !strings.Contains(perr.Error(), "2 times with this message in flight") {
		t.Errorf("the unparseable message = %v; want it failed with the broker's 541 after two closures", perr)
	}
	if lost := strings.Count(logs.String(), "connection lost"); lost != 2 {
		t.Errorf("the connection was lost %d times; want 2 (the message sent twice, never a third time):\n%s", lost, logs.String())
	}
	ids := drainQueue(t, tr, q)
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		switch {
		case i == poison && ids[id] != 0:
			t.Errorf("the unparseable message reached the queue")
		case i != poison && ids[id] == 0:
			t.Errorf("%s was confirmed but is not in the queue", id)
		}
	}
	if err := tr.Health(ctxT(t)); err != nil {
		t.Errorf("Health: %v", err)
	}
}

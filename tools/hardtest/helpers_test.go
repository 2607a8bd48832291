package hardtest_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

// Order is the payload the consumers under test expect.
type Order struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}

// quiet drops the warnings the tests provoke on purpose.
var quiet = slog.New(slog.DiscardHandler)

// wait bounds every single wait in the suite. It is a guard against a hang,
// never an assertion about speed.
const wait = 30 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// connect opens an acemq Conn on url, closed when the test ends.
func connect(t testing.TB, url string, opts ...acemq.ConnOption) *acemq.Conn {
	t.Helper()
	opts = append([]acemq.ConnOption{acemq.WithLogger(quiet)}, opts...)
	c, err := acemq.Connect(ctxT(t), url, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// settlements collects what OnSettled reports.
type settlements chan acemq.Settlement

func newSettlements(n int) (settlements, acemq.ConnOption) {
	ch := make(settlements, n)
	return ch, acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { ch <- s })
}

func (ch settlements) next(t testing.TB) acemq.Settlement {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(wait):
		t.Fatalf("no settlement within %v", wait)
		return acemq.Settlement{}
	}
}

// start runs c until the test ends (or stop is called) and checks Run
// returned nil or ErrClosed.
func start[T any](t testing.TB, c *acemq.Consumer[T]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, acemq.ErrClosed) {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(wait):
			t.Errorf("Run did not return within %v of its ctx ending", wait)
		}
	}
	t.Cleanup(stop)
	return stop
}

// raw is a plain amqp091-go client: the foreign producer, and the reader of
// dead-letter and parking queues.
type raw struct {
	t    testing.TB
	conn *amqp.Connection
	ch   *amqp.Channel
}

func dialRaw(t testing.TB, url string) *raw {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	return &raw{t: t, conn: conn, ch: ch}
}

// publish sends p to queue through the default exchange and waits for the
// broker's confirm.
func (r *raw) publish(queue string, p amqp.Publishing) error {
	r.t.Helper()
	dc, err := r.ch.PublishWithDeferredConfirmWithContext(ctxT(r.t), "", queue, true, false, p)
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctxT(r.t))
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("nacked")
	}
	return nil
}

// get waits for a message on queue and acks it.
func (r *raw) get(queue string) amqp.Delivery {
	r.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		d, ok, err := r.ch.Get(queue, false)
		require.NoError(r.t, err)
		if ok {
			require.NoError(r.t, d.Ack(false))
			return d
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("nothing arrived on %s within %v", queue, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// count returns how many ready messages queue holds.
func (r *raw) count(queue string) int {
	r.t.Helper()
	q, err := r.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(r.t, err)
	return q.Messages
}

// queue names a queue of the test's own and deletes it, with the derived
// queues and the given retry tiers, when the test ends.
func queue(t testing.TB, url, base string, tiers ...time.Duration) string {
	t.Helper()
	q := acemqtest.QueueName(t, base)
	names := []string{q}
	for _, d := range tiers {
		names = append(names, acemq.RetryQueue(q, d))
	}
	acemqtest.DeleteQueuesAfter(t, url, names...)
	return q
}

// footprint is what the leak checks compare: goroutines, and the live heap
// after a collection.
type footprint struct {
	goroutines int
	heap       uint64
}

func measure() footprint {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return footprint{goroutines: runtime.NumGoroutine(), heap: ms.HeapAlloc}
}

// settle waits until the footprint is back within tolerance of base: extra
// goroutines at most slack, heap at most heapSlack above base. It polls
// because goroutines end a little after the calls that stop them; it is a
// bounded wait, not a timing assertion.
func settleTo(t testing.TB, base footprint, slack int, heapSlack uint64) footprint {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		now := measure()
		if now.goroutines <= base.goroutines+slack && now.heap <= base.heap+heapSlack {
			return now
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("footprint did not return to baseline: goroutines %d (baseline %d, slack %d), heap %d (baseline %d, slack %d)\n%s",
				now.goroutines, base.goroutines, slack, now.heap, base.heap, heapSlack, buf[:n])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

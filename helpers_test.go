package acemq_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/require"
)

// OrderPlaced is the payload most tests send.
type OrderPlaced struct {
	OrderID    string `json:"orderId"`
	TotalCents int64  `json:"totalCents"`
}

// quiet drops the warnings tests provoke on purpose.
var quiet = slog.New(slog.DiscardHandler)

// fastRetry is a ladder short enough for tests.
var fastRetry = acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}}

// connect opens a Conn on a memory broker of the test's own.
func connect(t *testing.T, opts ...acemq.ConnOption) *acemq.Conn {
	t.Helper()
	return connectURL(t, acemqtest.Memory(t), opts...)
}

func connectURL(t *testing.T, url string, opts ...acemq.ConnOption) *acemq.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts = append([]acemq.ConnOption{acemq.WithLogger(quiet)}, opts...)
	c, err := acemq.Connect(ctx, url, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// settlements collects what OnSettled reports.
type settlements chan acemq.Settlement

func newSettlements() (settlements, acemq.ConnOption) {
	ch := make(settlements, 1024)
	return ch, acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { ch <- s })
}

func (ch settlements) next(t *testing.T) acemq.Settlement {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no settlement within 10s")
		return acemq.Settlement{}
	}
}

// none checks that nothing more settles for a little while.
func (ch settlements) none(t *testing.T) {
	t.Helper()
	select {
	case s := <-ch:
		t.Fatalf("unexpected settlement: %+v", s)
	case <-time.After(100 * time.Millisecond):
	}
}

// runner is a Consumer or a Router.
type runner interface {
	Run(ctx context.Context) error
}

// run starts c.Run and stops it when the test ends, checking it returned nil.
func run(t *testing.T, c runner) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, acemq.ErrClosed) {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its ctx ending")
		}
	})
}

// take waits for a message on queue and acks it.
func take(t *testing.T, c *acemq.Conn, queue string) transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		d, ok, err := c.Transport().Get(ctx, queue)
		require.NoError(t, err)
		if ok {
			require.NoError(t, d.Ack())
			return d
		}
		select {
		case <-ctx.Done():
			t.Fatalf("nothing arrived on %s within 10s", queue)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// empty checks that queue holds nothing.
func empty(t *testing.T, c *acemq.Conn, queue string) {
	t.Helper()
	info, err := c.Transport().Inspect(context.Background(), queue)
	require.NoError(t, err)
	require.Zero(t, info.Messages, "messages on %s", queue)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// acemqtestQueue names a queue for this test.
func acemqtestQueue(t *testing.T) string { return acemqtest.QueueName(t, "q") }

// declareQueue declares a plain queue of the test's own and returns its name.
func declareQueue(t *testing.T, c *acemq.Conn) string {
	t.Helper()
	return declareQueueNamed(t, c, acemqtestQueue(t))
}

func declareQueueNamed(t *testing.T, c *acemq.Conn, name string) string {
	t.Helper()
	require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: name}))
	t.Cleanup(func() { // before the Conn closes: cleanups run last-registered first
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A test that closed the Conn itself deletes the queue its own way
		// (on memory, it went with the broker).
		if err := c.Transport().DeleteQueue(ctx, name); err != nil && !errors.Is(err, acemq.ErrClosed) {
			t.Errorf("deleting queue %q: %v", name, err)
		}
	})
	return name
}

// countPrefix counts the acemq: prefixes in an error text: one, at its
// front, for an error acemq made whose causes are acemq's own or foreign.
// (A transport's sentinels read "transport: ".)
func countPrefix(s string) int { return strings.Count(s, "acemq:") }

// transportPrefix is how the errors of the transport behind url begin.
func transportPrefix(url string) string {
	if strings.HasPrefix(url, "memory:") {
		return "memory:"
	}
	return "rabbitmq:"
}

package patterns_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// OrderPlaced is the payload most tests send.
type OrderPlaced struct {
	OrderID    string `json:"orderId"`
	TotalCents int64  `json:"totalCents"`
}

var quiet = slog.New(slog.DiscardHandler)

// brokers are the transports the integration tests run on: the memory
// broker always, RabbitMQ when acemqtest finds one (skipped otherwise).
var brokers = []struct {
	name string
	url  func(testing.TB) string
}{
	{"memory", acemqtest.Memory},
	{"rabbitmq", acemqtest.RabbitMQ},
}

// connect opens a Conn to url, closed when the test ends.
func connect(t *testing.T, url string, opts ...acemq.ConnOption) *acemq.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := acemq.Connect(ctx, url, append([]acemq.ConnOption{acemq.WithLogger(quiet)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// queue names a queue of the test's own, declares it and deletes it (with
// whatever a consumer derived from it) when the test ends. Call it after
// connect, so the deletion runs before the Conn closes.
func queue(t *testing.T, c *acemq.Conn, base string, derived ...string) string {
	t.Helper()
	q := acemqtest.QueueName(t, base)
	require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: q}))
	deleteAfter(t, c, q, derived...)
	return q
}

// defaultTiers are the retry queues of a consumer on the default policy.
var defaultTiers = []string{".retry.1s", ".retry.5s", ".retry.30s", ".retry.2m0s"}

// deleteAfter deletes q, q.dlq, q.parked and q+suffix for each suffix when
// the test ends.
func deleteAfter(t *testing.T, c *acemq.Conn, q string, suffixes ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range append([]string{"", ".dlq", ".parked"}, suffixes...) {
			_ = c.Transport().DeleteQueue(ctx, q+s)
		}
	})
}

// run starts cons and stops it when the test ends.
func run[T any](t *testing.T, cons *acemq.Consumer[T]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && err != acemq.ErrClosed {
			t.Errorf("Run: %v", err)
		}
	})
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

// count reports the ready messages on q.
func count(t *testing.T, c *acemq.Conn, q string) int {
	t.Helper()
	info, err := c.Transport().Inspect(ctxT(t), q)
	require.NoError(t, err)
	return info.Messages
}

// eventually waits up to 10s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

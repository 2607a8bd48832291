package otel_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/otel"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// OrderPlaced is the payload the tests send.
type OrderPlaced struct {
	OrderID string `json:"orderId"`
}

var quiet = slog.New(slog.DiscardHandler)

// fastRetry is a ladder short enough for tests.
var fastRetry = acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{10 * time.Millisecond}}

// rig is a traced Conn on a memory broker of the test's own, with a span
// recorder and the settlements OnSettled reports.
type rig struct {
	tp      *sdktrace.TracerProvider
	spans   *tracetest.SpanRecorder
	tracing *otel.Tracing
	conn    *acemq.Conn
	settled chan acemq.Settlement
}

func newRig(t *testing.T, opts ...acemq.ConnOption) *rig {
	t.Helper()
	r := &rig{spans: tracetest.NewSpanRecorder(), settled: make(chan acemq.Settlement, 64)}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() { _ = r.tp.Shutdown(context.Background()) })
	r.tracing = otel.New(otel.WithTracerProvider(r.tp))
	base := []acemq.ConnOption{
		acemq.WithRetryPolicy(fastRetry),
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { r.settled <- s }),
	}
	r.conn = connectPlain(t, append(append(base, opts...), acemq.WithPublishInterceptor(r.tracing.PublishInterceptor()))...)
	return r
}

// connectPlain opens a Conn on a memory broker of the test's own.
func connectPlain(t *testing.T, opts ...acemq.ConnOption) *acemq.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := acemq.Connect(ctx, acemqtest.Memory(t), append([]acemq.ConnOption{acemq.WithLogger(quiet)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// consume starts a consumer of queue with h wrapped by otel.Handle and stops
// it when the test ends.
func (r *rig) consume(t *testing.T, queue string, h acemq.Handler[OrderPlaced]) {
	t.Helper()
	cons, err := acemq.NewConsumer(r.conn, queue, otel.Handle(r.tracing, queue, h))
	require.NoError(t, err)
	runConsumer(t, cons)
}

// runConsumer runs cons, a Consumer or a Router, until the test ends.
func runConsumer(t *testing.T, cons interface{ Run(context.Context) error }) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func (r *rig) next(t *testing.T) acemq.Settlement {
	t.Helper()
	select {
	case s := <-r.settled:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no settlement within 10s")
		return acemq.Settlement{}
	}
}

// ended returns the ended spans with the given kind, in the order they ended.
func (r *rig) ended(kind string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if kind == "" || s.SpanKind().String() == kind {
			out = append(out, s)
		}
	}
	return out
}

// attr returns a span's attribute as a string, "" when absent.
func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

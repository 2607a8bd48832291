package otelblob_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/otel"
	"github.com/acemq/acemq/otel/otelblob"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type Report struct{ Name string }

// TestBlobSpans: the store's Put is a child of the publish span, and the
// Open (the read) a child of the process span, all in one trace.
func TestBlobSpans(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracing := otel.New(otel.WithTracerProvider(tp))
	settled := make(chan acemq.Settlement, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := acemq.Connect(ctx, acemqtest.Memory(t), acemq.WithLogger(slog.New(slog.DiscardHandler)),
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }),
		acemq.WithPublishInterceptor(tracing.PublishInterceptor()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })

	q := acemqtest.QueueName(t, "reports")
	s := blob.Memory()
	cons, err := acemq.NewConsumer(conn, q, otel.Handle(tracing, q, blob.Handle(otelblob.Store(tracing, s),
		func(_ context.Context, _ *acemq.Message[Report], body *blob.Reader) acemq.Ack {
			_, err := io.Copy(io.Discard, body)
			return acemq.AckOf(err)
		})))
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})

	ref, err := otelblob.NewPublisher[Report](tracing, conn, s, "", q).Send(ctx, Report{Name: "q3"}, bytes.NewReader(make([]byte, 3<<20)))
	require.NoError(t, err)
	select {
	case st := <-settled:
		require.Equal(t, acemq.OutcomeAcked, st.Outcome)
	case <-ctx.Done():
		t.Fatal("the message was not settled")
	}

	byName := map[string]trace.SpanContext{}
	parents := map[string]trace.SpanContext{}
	for _, sp := range spans.Ended() {
		byName[sp.Name()] = sp.SpanContext()
		parents[sp.Name()] = sp.Parent()
		if sp.Name() == "blob open" {
			assert.Equal(t, ref.ID, attr(sp, "acemq.blob.id"))
			assert.Equal(t, "3145728", attr(sp, "acemq.blob.read"))
		}
		if sp.Name() == "blob put" {
			assert.Equal(t, "3145728", attr(sp, "acemq.blob.size"))
		}
		if sp.Name() == "publish amq.default" {
			assert.Equal(t, ref.ID, attr(sp, "acemq.blob.id"))
		}
	}
	require.Contains(t, byName, "publish amq.default")
	require.Contains(t, byName, "process "+q)
	assert.Equal(t, byName["publish amq.default"].SpanID(), parents["blob put"].SpanID(), "Put under publish")
	assert.Equal(t, byName["process "+q].SpanID(), parents["blob open"].SpanID(), "Open under process")
	assert.Equal(t, byName["publish amq.default"].TraceID(), byName["blob open"].TraceID(), "one trace")
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

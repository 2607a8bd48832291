package otel_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

type Report struct{ Name string }

// TestBlobSpans: the store's Put is a child of the publish span, and the
// Open (the read) a child of the process span, all in one trace.
func TestBlobSpans(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	q := acemqtest.QueueName(t, "reports")
	s := blob.Memory()
	cons, err := acemq.NewConsumer(r.conn, q, otel.Handle(r.tracing, q, blob.Handle(otel.Store(r.tracing, s),
		func(_ context.Context, _ *acemq.Message[Report], body *blob.Reader) acemq.Ack {
			_, err := io.Copy(io.Discard, body)
			return acemq.AckOf(err)
		})))
	require.NoError(t, err)
	runConsumer(t, cons)
	ref, err := otel.NewBlobPublisher[Report](r.tracing, r.conn, s, "", q).Send(ctxT(t), Report{Name: "q3"}, bytes.NewReader(make([]byte, 3<<20)))
	require.NoError(t, err)
	require.Equal(t, acemq.OutcomeAcked, r.next(t).Outcome)

	byName := map[string]trace.SpanContext{}
	parents := map[string]trace.SpanContext{}
	for _, sp := range r.ended("") {
		byName[sp.Name()] = sp.SpanContext()
		parents[sp.Name()] = sp.Parent()
		if sp.Name() == "blob open" {
			assert.Equal(t, ref.ID, attr(sp, "acemq.blob.id"))
			assert.Equal(t, "3145728", attr(sp, "acemq.blob.read"))
		}
		if sp.Name() == "blob put" {
			assert.Equal(t, "3145728", attr(sp, "acemq.blob.size"))
		}
	}
	require.Contains(t, byName, "publish amq.default")
	require.Contains(t, byName, "process "+q)
	assert.Equal(t, byName["publish amq.default"].SpanID(), parents["blob put"].SpanID(), "Put under publish")
	assert.Equal(t, byName["process "+q].SpanID(), parents["blob open"].SpanID(), "Open under process")
	assert.Equal(t, byName["publish amq.default"].TraceID(), byName["blob open"].TraceID(), "one trace")
}

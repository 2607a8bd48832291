package otel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Refund is the second type routed on one queue.
type Refund struct {
	OrderID string `json:"orderId"`
}

// TestTracingPerRoute wraps each route of a Router, one with Handle and one
// with Middleware, and checks each delivery gets its own consumer span,
// child of its producer's, ended with the real outcome.
func TestTracingPerRoute(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	q := acemqtest.QueueName(t, "billing")
	router := acemq.NewRouter(r.conn, q)
	inOrder := make(chan trace.SpanContext, 1)
	acemq.Route(router, otel.Handle(r.tracing, q, func(ctx context.Context, _ *acemq.Message[OrderPlaced]) acemq.Ack {
		inOrder <- trace.SpanContextFromContext(ctx)
		return acemq.Done()
	}))
	acemq.Route(router, otel.Middleware[Refund](r.tracing, q)(func(context.Context, *acemq.Message[Refund]) acemq.Ack {
		return acemq.Reject(errors.New("refunds are closed"))
	}))
	runConsumer(t, router)

	require.NoError(t, otel.NewPublisher[OrderPlaced](r.tracing, r.conn, "", q).Send(ctxT(t), OrderPlaced{OrderID: "A-1"}))
	assert.Equal(t, acemq.OutcomeAcked, r.next(t).Outcome)
	require.NoError(t, otel.NewPublisher[Refund](r.tracing, r.conn, "", q).Send(ctxT(t), Refund{OrderID: "A-1"}))
	assert.Equal(t, acemq.OutcomeRejected, r.next(t).Outcome)

	producers, consumers := r.ended("producer"), r.ended("consumer")
	require.Len(t, producers, 2)
	require.Len(t, consumers, 2, "one consumer span per delivery, ended before OnSettled runs")
	for i, c := range consumers {
		p := producers[i]
		assert.Equal(t, "process "+q, c.Name())
		assert.Equal(t, p.SpanContext().TraceID(), c.SpanContext().TraceID(), "delivery %d is in its producer's trace", i)
		assert.Equal(t, p.SpanContext().SpanID(), c.Parent().SpanID())
	}
	assert.Equal(t, consumers[0].SpanContext(), <-inOrder, "the OrderPlaced handler runs inside its span")
	assert.Equal(t, "acked", attr(consumers[0], "messaging.acemq.outcome"))
	assert.Equal(t, codes.Unset, consumers[0].Status().Code)
	assert.Equal(t, "rejected", attr(consumers[1], "messaging.acemq.outcome"))
	assert.Equal(t, codes.Error, consumers[1].Status().Code)
	assert.Equal(t, "the handler rejected it: refunds are closed", consumers[1].Status().Description)
}

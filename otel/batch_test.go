package otel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// A batch has a span of its own, where the handler runs, and each of its
// messages a span that is the child of its producer's, linked to the batch
// span and ended at its settlement with its outcome.
func TestHandleBatchOpensASpanPerMessageLinkedToTheBatch(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	q := acemqtest.QueueName(t, "orders")
	inHandler := make(chan trace.SpanContext, 1)
	h := otel.HandleBatch(r.tracing, q, func(ctx context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
		inHandler <- trace.SpanContextFromContext(ctx)
		acks := make([]acemq.Ack, len(batch))
		for i, m := range batch {
			acks[i] = acemq.Done()
			if m.Payload.OrderID == "bad" {
				acks[i] = acemq.Reject(errors.New("no such customer"))
			}
		}
		return acks
	})
	cons, err := acemq.NewBatchConsumer(r.conn, q, h, acemq.BatchWait(2*time.Second))
	require.NoError(t, err)
	pub := otel.NewPublisher[OrderPlaced](r.tracing, r.conn, "", q)
	for _, r := range pub.SendAll(ctxT(t), []OrderPlaced{{OrderID: "a"}, {OrderID: "bad"}, {OrderID: "c"}}) {
		require.NoError(t, r.Err)
	}
	runConsumer(t, cons)
	for range 3 {
		r.next(t)
	}

	producers := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, p := range r.ended("producer") {
		producers[p.SpanContext().SpanID()] = p
	}
	require.Len(t, producers, 3)
	var batchSpan sdktrace.ReadOnlySpan
	var messages []sdktrace.ReadOnlySpan
	for _, s := range r.ended("consumer") {
		switch s.Name() {
		case "process " + q + " batch":
			batchSpan = s
		case "process " + q:
			messages = append(messages, s)
		}
	}
	require.NotNil(t, batchSpan)
	require.Len(t, messages, 3, "one span per message, each ended at its settlement")
	assert.Equal(t, batchSpan.SpanContext(), <-inHandler, "the handler runs inside the batch span")
	assert.Equal(t, "3", attr(batchSpan, "messaging.batch.message_count"))
	assert.Equal(t, q, attr(batchSpan, "messaging.destination.name"))
	require.Len(t, batchSpan.Links(), 3, "the batch span links to every producer span")
	for _, l := range batchSpan.Links() {
		assert.Contains(t, producers, l.SpanContext.SpanID())
	}
	outcomes := map[string]int{}
	for _, m := range messages {
		p, ok := producers[m.Parent().SpanID()]
		require.True(t, ok, "a message span is its producer span's child")
		assert.Equal(t, p.SpanContext().TraceID(), m.SpanContext().TraceID())
		require.Len(t, m.Links(), 1)
		assert.Equal(t, batchSpan.SpanContext().SpanID(), m.Links()[0].SpanContext.SpanID(), "linked to the batch span")
		assert.NotEmpty(t, attr(m, "messaging.message.id"))
		outcome := attr(m, "messaging.acemq.outcome")
		outcomes[outcome]++
		if outcome == "rejected" {
			assert.Equal(t, codes.Error, m.Status().Code)
			assert.Equal(t, "the handler rejected it: no such customer", attr(m, "messaging.acemq.reason"))
		} else {
			assert.Equal(t, codes.Unset, m.Status().Code)
		}
	}
	assert.Equal(t, map[string]int{"acked": 2, "rejected": 1}, outcomes)
	assert.Equal(t, codes.Unset, batchSpan.Status().Code)
}

// A batch handler that panics ends its batch span with an error status,
// and each message span with the retry the engine made of it.
func TestHandleBatchPanic(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	q := acemqtest.QueueName(t, "orders")
	var calls int
	h := otel.HandleBatch(r.tracing, q, func(context.Context, []*acemq.Message[OrderPlaced]) []acemq.Ack {
		calls++
		if calls == 1 {
			panic("the pool is gone")
		}
		return nil
	})
	cons, err := acemq.NewBatchConsumer(r.conn, q, h, acemq.BatchWait(2*time.Second))
	require.NoError(t, err)
	pub := otel.NewPublisher[OrderPlaced](r.tracing, r.conn, "", q)
	for _, r := range pub.SendAll(ctxT(t), []OrderPlaced{{OrderID: "a"}, {OrderID: "b"}}) {
		require.NoError(t, r.Err)
	}
	runConsumer(t, cons)
	for range 4 { // retried twice, then acked twice
		r.next(t)
	}
	var batches []sdktrace.ReadOnlySpan
	outcomes := map[string]int{}
	for _, s := range r.ended("consumer") {
		if s.Name() == "process "+q+" batch" {
			batches = append(batches, s)
		} else {
			outcomes[attr(s, "messaging.acemq.outcome")]++
		}
	}
	require.NotEmpty(t, batches)
	assert.Equal(t, codes.Error, batches[0].Status().Code)
	assert.Equal(t, "the batch handler panicked: the pool is gone", batches[0].Status().Description)
	assert.Equal(t, map[string]int{"retried": 2, "acked": 2}, outcomes)
}

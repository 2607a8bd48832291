package otel

import (
	"context"
	"fmt"

	"github.com/acemq/acemq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// keyBatchCount is the messaging conventions' size of a batch.
const keyBatchCount = attribute.Key("messaging.batch.message_count")

// HandleBatch wraps h, a batch consumer's handler, so that each batch is
// handled inside a span of its own and each message of it has a span too:
//
//   - the batch span, "process <queue> batch", is where h runs (ctx carries
//     it, so what h does is its child). It has messaging.batch.message_count,
//     a link to the producer span of every message that carries one, and
//     ends when h returns: with an error status when h panics (the panic goes
//     on to the engine) or returns a result of the wrong length.
//   - the message spans, "process <queue>", one per message of the batch, as
//     Handle opens them: a child of the message's producer span, with the
//     message's attributes, and a link to the batch span. Each ends when its
//     message settles, with messaging.acemq.outcome, exactly as Handle's.
//
// The message spans are ended by acemq.WhenSettled callbacks registered
// from the batch's ctx, so h must run under acemq.NewBatchConsumer; called
// directly, outside a batch, they are left open. A message that never
// reached the batch (refused by an interceptor, parked) has no span.
func HandleBatch[T any](t *Tracing, queue string, h acemq.BatchHandler[T]) acemq.BatchHandler[T] {
	if t == nil {
		t = New()
	}
	name, batchName := "process "+queue, "process "+queue+" batch"
	return func(ctx context.Context, batch []*acemq.Message[T]) []acemq.Ack {
		parents := make([]context.Context, len(batch))
		links := make([]trace.Link, 0, len(batch))
		for i, m := range batch {
			parents[i] = t.extract(ctx, m.Envelope)
			if sc := trace.SpanContextFromContext(parents[i]); sc.IsValid() && sc.IsRemote() {
				links = append(links, trace.Link{SpanContext: sc})
			}
		}
		bctx, bspan := t.tracer.Start(ctx, batchName,
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithLinks(links...),
			trace.WithAttributes(processAttributes(queue)...),
			trace.WithAttributes(keyBatchCount.Int(len(batch))))
		toBatch := trace.WithLinks(trace.Link{SpanContext: bspan.SpanContext()})
		spans := make(map[*acemq.Envelope]trace.Span, len(batch))
		for i, m := range batch {
			_, span := t.startProcess(parents[i], name, queue, m.Envelope, toBatch)
			spans[m.Envelope] = span
		}
		// The engine runs each message's callbacks once, one message at a
		// time; the map is only read.
		acemq.WhenSettled(bctx, func(_ context.Context, s acemq.Settlement) {
			if span, ok := spans[s.Envelope]; ok {
				finish(span, s)
			}
		})
		defer func() {
			if p := recover(); p != nil {
				bspan.SetStatus(codes.Error, fmt.Sprintf("the batch handler panicked: %v", p))
				bspan.End()
				panic(p)
			}
		}()
		acks := h(bctx, batch)
		if acks != nil && len(acks) != len(batch) {
			bspan.SetStatus(codes.Error, fmt.Sprintf("the batch handler returned %d Acks for a batch of %d", len(acks), len(batch)))
		}
		bspan.End()
		return acks
	}
}

package otel

import (
	"context"

	"github.com/acemq/acemq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Handle wraps h so that each delivery is handled inside a consumer span,
// "process <queue>", whose parent is the trace context the envelope's
// headers carry (the producer's span, when a traced Publisher sent it). The
// span ends once the delivery settles, with messaging.acemq.outcome set to
// the settlement's outcome and an error status for rejected, dead_lettered
// and parked. When the engine could not move the message and put it back in
// its queue, the span ends with an error status and no outcome.
//
// The span is ended by an acemq.WhenSettled callback, so h must run under a
// Consumer (as every Handler given to acemq.NewConsumer does); called
// directly, outside a delivery, the span is left open.
func Handle[T any](t *Tracing, queue string, h acemq.Handler[T]) acemq.Handler[T] {
	if t == nil {
		t = New()
	}
	name := "process " + queue
	return func(ctx context.Context, m *acemq.Message[T]) acemq.Ack {
		ctx, span := t.startProcess(t.extract(ctx, m.Envelope), name, queue, m.Envelope)
		// The engine runs each delivery's callbacks once.
		acemq.WhenSettled(ctx, func(_ context.Context, s acemq.Settlement) { finish(span, s) })
		return h(ctx, m)
	}
}

// startProcess opens the consumer span of one message, named name, as a
// child of what ctx carries.
func (t *Tracing) startProcess(ctx context.Context, name, queue string, env *acemq.Envelope, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	ctx, span := t.tracer.Start(ctx, name, append(opts,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(processAttributes(queue)...))...)
	if env != nil && span.IsRecording() {
		span.SetAttributes(keyMessageID.String(env.ID), keyAttempt.Int(env.Attempt))
		if env.CorrelationID != "" {
			span.SetAttributes(keyConversationID.String(env.CorrelationID))
		}
	}
	return ctx, span
}

// processAttributes are the attributes every process span of queue has,
// a message's or a batch's.
func processAttributes(queue string) []attribute.KeyValue {
	return []attribute.KeyValue{
		systemRabbitMQ,
		keyOperationType.String("process"),
		keyOperationName.String("process"),
		keyDestination.String(queue),
	}
}

// Middleware is Handle as an acemq.Middleware, for patterns.Chain. Put it
// outermost, so the span covers, and its outcome reflects, what the inner
// middleware decided.
func Middleware[T any](t *Tracing, queue string) acemq.Middleware[T] {
	return func(next acemq.Handler[T]) acemq.Handler[T] { return Handle(t, queue, next) }
}

// finish records a settlement on span and ends it.
func finish(span trace.Span, s acemq.Settlement) {
	defer span.End()
	if s.Outcome == "" {
		// The move failed and the delivery went back to its queue: it
		// will come again, with a span of its own.
		span.SetAttributes(keyReason.String(s.Reason))
		span.SetStatus(codes.Error, s.Reason)
		return
	}
	span.SetAttributes(keyOutcome.String(string(s.Outcome)))
	if s.Outcome != acemq.OutcomeAcked && s.Reason != "" {
		span.SetAttributes(keyReason.String(s.Reason))
	}
	switch s.Outcome {
	case acemq.OutcomeRejected, acemq.OutcomeDeadLettered, acemq.OutcomeParked:
		span.SetStatus(codes.Error, s.Reason)
	}
}

package otel

import (
	"context"
	"slices"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/internal/wire"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// publishKey marks a context whose current span is a publish span this
// package opened, so the interceptor completes that span and no other.
type publishKey struct{}

// PublishInterceptor returns the interceptor that writes the trace context
// of the publish into the envelope's headers (traceparent and tracestate
// with the default propagator) and adds the message ID, the destination
// and the correlation ID to the publish span a Publisher opened. Under a
// plain acemq.Publisher it still writes whatever trace context the caller's
// ctx carries, so consumers join the caller's trace, but it touches no span.
// Register it last, so it sees the destination the chain settled on.
func (t *Tracing) PublishInterceptor() acemq.PublishInterceptor {
	return func(ctx context.Context, c *acemq.PublishContext) error {
		if c.Envelope == nil {
			c.Envelope = &acemq.Envelope{}
		}
		if c.Envelope.Headers == nil {
			c.Envelope.Headers = make(map[string]any, 2)
		}
		t.propagator().Inject(ctx, headerCarrier(c.Envelope.Headers))
		// Span values are not always comparable (a no-op span holds a
		// SpanContext): compare their identities instead.
		span := trace.SpanFromContext(ctx)
		ours, _ := ctx.Value(publishKey{}).(trace.Span)
		if ours == nil || !span.IsRecording() || !ours.SpanContext().Equal(span.SpanContext()) {
			return nil
		}
		dest := wire.ExchangeName(c.Exchange)
		span.SetName("publish " + dest)
		span.SetAttributes(
			keyDestination.String(dest),
			keyRoutingKey.String(c.RoutingKey),
			keyMessageID.String(c.Envelope.ID),
		)
		if c.Envelope.CorrelationID != "" {
			span.SetAttributes(keyConversationID.String(c.Envelope.CorrelationID))
		}
		return nil
	}
}

// Publisher is an acemq.Publisher that opens a producer span around every
// message it sends. It is safe for concurrent use.
type Publisher[T any] struct {
	t        *Tracing
	inner    *acemq.Publisher[T]
	exchange string
	key      string
}

// NewPublisher returns a traced Publisher of T to exchange with routingKey;
// the options are acemq.NewPublisher's. The trace context reaches the wire
// only when the Conn has t's PublishInterceptor.
func NewPublisher[T any](t *Tracing, c *acemq.Conn, exchange, routingKey string, opts ...acemq.PublisherOption) *Publisher[T] {
	if t == nil {
		t = New()
	}
	return &Publisher[T]{
		t:        t,
		inner:    acemq.NewPublisher[T](c, exchange, routingKey, opts...),
		exchange: exchange,
		key:      routingKey,
	}
}

// Send publishes v as acemq.Publisher.Send does, inside a producer span,
// "publish <destination>", that ends when the broker confirmed the message
// or the send failed (the span then has an error status).
func (p *Publisher[T]) Send(ctx context.Context, v T, opts ...acemq.SendOption) error {
	return p.SendAll(ctx, []T{v}, opts...)[0].Err
}

// SendAll publishes every value of vs as acemq.Publisher.SendAll does, on
// its path (the publish chains first, then every message pipelined), with
// one span per message, each a child of ctx's span; the results are in
// vs's order.
func (p *Publisher[T]) SendAll(ctx context.Context, vs []T, opts ...acemq.SendOption) []acemq.PublishResult {
	return p.inner.SendAll(ctx, vs, append(slices.Clip(opts), acemq.PerMessage(p.span))...)
}

// span opens the span of one message: it starts before the message's
// publish chain, which sees it in ctx, and ends with the message's result,
// whose ID it records even without the interceptor.
func (p *Publisher[T]) span(ctx context.Context) (context.Context, func(id string, err error)) {
	return p.t.StartPublish(ctx, p.exchange, p.key)
}

// StartPublish opens the producer span of one message to exchange with
// routingKey, "publish <destination>", as a Publisher does for each message
// it sends, and returns ctx carrying it and the function that ends it with
// the message's ID (recorded when not empty) and result (an error status
// when err is not nil). Publish through the returned ctx: the Conn's
// PublishInterceptor completes this span and writes its trace context into
// the envelope. It is the seam for publishers built outside this package,
// such as otelblob's; call end exactly once.
func (t *Tracing) StartPublish(ctx context.Context, exchange, routingKey string) (_ context.Context, end func(id string, err error)) {
	dest := wire.ExchangeName(exchange)
	ctx, span := t.tracer.Start(ctx, "publish "+dest,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			systemRabbitMQ,
			keyOperationType.String("publish"),
			keyOperationName.String("publish"),
			keyDestination.String(dest),
			keyRoutingKey.String(routingKey),
		))
	return context.WithValue(ctx, publishKey{}, span), func(id string, err error) {
		if id != "" {
			span.SetAttributes(keyMessageID.String(id))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

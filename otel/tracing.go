// Package otel traces acemq messages with OpenTelemetry. [Tracing] is a
// wrapper around the engine, not a part of it: a plain acemq.Publisher or
// Handler opens no span, and only what is wrapped here is traced.
//
// # Publishing
//
// A [Publisher] from [NewPublisher] opens a producer span, "publish
// <destination>", and then sends through an ordinary acemq.Publisher with
// the span in the context. The interceptor from [Tracing.PublishInterceptor],
// registered on the Conn, runs inside that span: it writes the trace
// context (traceparent, tracestate, baggage) into the envelope's headers and
// completes the span with what only the envelope knows, its message ID. Put
// it last among the publish interceptors, so the destination it records is
// the one the chain settled on.
//
//	tracing := otel.New()
//	mq, err := acemq.Connect(ctx, url, acemq.WithPublishInterceptor(tracing.PublishInterceptor()))
//	orders := otel.NewPublisher[OrderPlaced](tracing, mq, "", "orders")
//
// # Consuming
//
// [Handle], or [Middleware] in a patterns.Chain, reads the trace context from
// the envelope's headers and opens a consumer span, "process <queue>", as a
// child of the producer's span. The span ends when the delivery settles
// (through acemq.WhenSettled), so it carries the real outcome in
// messaging.acemq.outcome: a retry that the ladder turned into a dead
// letter says dead_lettered, not retried. Rejected, dead-lettered and
// parked deliveries get an error status. The consume interceptors run
// before the handler, so before the span exists: a delivery an interceptor
// refuses has no consumer span, though its settlement is still reported to
// OnSettled.
//
// A batch consumer's handler is wrapped with [HandleBatch]: the handler runs
// in a batch span, "process <queue> batch", linked to every message's
// producer span, and each message gets the span Handle would give it,
// linked to the batch span and ended at its own settlement.
//
// # Attributes
//
// Spans use the OpenTelemetry messaging conventions: messaging.system
// (rabbitmq), messaging.operation.type (publish or process),
// messaging.operation.name, messaging.destination.name (the exchange,
// amq.default for the default one, on a publish; the queue on a process),
// messaging.rabbitmq.destination.routing_key, messaging.message.id and
// messaging.message.conversation_id (the correlation ID). acemq adds
// messaging.acemq.outcome, messaging.acemq.attempt and, for a delivery that
// did not end acked, messaging.acemq.reason.
package otel

import (
	"context"

	"github.com/acemq/acemq"
	gootel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the spans this package opens.
const ScopeName = "github.com/acemq/acemq/otel"

// Attribute keys: the messaging conventions' and acemq's own.
const (
	keySystem         = attribute.Key("messaging.system")
	keyOperationType  = attribute.Key("messaging.operation.type")
	keyOperationName  = attribute.Key("messaging.operation.name")
	keyDestination    = attribute.Key("messaging.destination.name")
	keyRoutingKey     = attribute.Key("messaging.rabbitmq.destination.routing_key")
	keyMessageID      = attribute.Key("messaging.message.id")
	keyConversationID = attribute.Key("messaging.message.conversation_id")
	keyOutcome        = attribute.Key("messaging.acemq.outcome")
	keyAttempt        = attribute.Key("messaging.acemq.attempt")
	keyReason         = attribute.Key("messaging.acemq.reason")
)

var systemRabbitMQ = keySystem.String("rabbitmq")

// Option configures a Tracing. Make one with WithTracerProvider or
// WithPropagator.
type Option interface{ apply(*Tracing) }

type optionFunc func(*Tracing)

func (f optionFunc) apply(t *Tracing) { f(t) }

// WithTracerProvider sets where spans are created. The default is the
// global provider (otel.GetTracerProvider), which follows a provider set
// later with otel.SetTracerProvider. A nil tp keeps the default.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(t *Tracing) {
		if tp != nil {
			t.tp = tp
		}
	})
}

// WithPropagator sets how the trace context is written into and read from
// the envelope's headers. The default is the global propagator when one has
// been set (otel.SetTextMapPropagator), otherwise W3C TraceContext and
// Baggage. A nil p keeps the default.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(t *Tracing) {
		if p != nil {
			t.prop = p
		}
	})
}

// Tracing holds what the traced publishers, the interceptor and the
// handlers share: the tracer and the propagator. It is safe for concurrent
// use; make one per process.
type Tracing struct {
	tp     trace.TracerProvider
	prop   propagation.TextMapPropagator
	tracer trace.Tracer
}

// fallback is the propagator used when none was given and none is global.
var fallback = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// New returns a Tracing configured by opts.
func New(opts ...Option) *Tracing {
	t := &Tracing{tp: gootel.GetTracerProvider()}
	for _, o := range opts {
		if o != nil {
			o.apply(t)
		}
	}
	t.tracer = t.tp.Tracer(ScopeName)
	return t
}

// propagator returns the propagator in force: the one given, else the
// global one once something has been set there, else the fallback. The
// global one is looked up each time, so setting it after New takes effect.
func (t *Tracing) propagator() propagation.TextMapPropagator {
	if t.prop != nil {
		return t.prop
	}
	if g := gootel.GetTextMapPropagator(); len(g.Fields()) > 0 {
		return g
	}
	return fallback
}

// headerCarrier reads and writes the trace context in an envelope's
// application headers.
type headerCarrier map[string]any

func (h headerCarrier) Get(key string) string {
	switch v := h[key].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

func (h headerCarrier) Set(key, value string) { h[key] = value }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// extract returns ctx carrying the remote span context env's headers hold,
// if any.
func (t *Tracing) extract(ctx context.Context, env *acemq.Envelope) context.Context {
	if env == nil || len(env.Headers) == 0 {
		return ctx
	}
	return t.propagator().Extract(ctx, headerCarrier(env.Headers))
}

// Tracer is the tracer t opens its spans with, from its provider under
// ScopeName. Packages that trace what acemq's wrappers do not (otelblob's
// store spans, say) open theirs with it so that they share t's provider
// and scope.
func (t *Tracing) Tracer() trace.Tracer { return t.tracer }

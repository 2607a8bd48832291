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
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestOneTraceFromPublishToHandler(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	q := acemqtest.QueueName(t, "orders")
	inHandler := make(chan trace.SpanContext, 1)
	r.consume(t, q, func(ctx context.Context, _ *acemq.Message[OrderPlaced]) acemq.Ack {
		inHandler <- trace.SpanContextFromContext(ctx)
		return acemq.Done()
	})
	pub := otel.NewPublisher[OrderPlaced](r.tracing, r.conn, "", q)
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "A-1"}, acemq.CorrelationID("conv-1")))
	s := r.next(t)
	require.Equal(t, acemq.OutcomeAcked, s.Outcome)

	producers, consumers := r.ended("producer"), r.ended("consumer")
	require.Len(t, producers, 1)
	require.Len(t, consumers, 1, "the consumer span ends before OnSettled runs")
	p, c := producers[0], consumers[0]
	assert.Equal(t, "publish amq.default", p.Name())
	assert.Equal(t, "process "+q, c.Name())
	assert.Equal(t, p.SpanContext().TraceID(), c.SpanContext().TraceID(), "one trace")
	assert.Equal(t, p.SpanContext().SpanID(), c.Parent().SpanID(), "the consumer span is the producer span's child")
	assert.True(t, c.Parent().IsRemote())
	assert.Equal(t, c.SpanContext(), <-inHandler, "the handler runs inside the consumer span")

	for _, tc := range []struct {
		name string
		span string
		key  string
		want string
	}{
		{"producer system", "p", "messaging.system", "rabbitmq"},
		{"producer operation", "p", "messaging.operation.type", "publish"},
		{"producer destination", "p", "messaging.destination.name", "amq.default"},
		{"producer routing key", "p", "messaging.rabbitmq.destination.routing_key", q},
		{"producer message id", "p", "messaging.message.id", s.Envelope.ID},
		{"producer conversation", "p", "messaging.message.conversation_id", "conv-1"},
		{"consumer system", "c", "messaging.system", "rabbitmq"},
		{"consumer operation", "c", "messaging.operation.type", "process"},
		{"consumer destination", "c", "messaging.destination.name", q},
		{"consumer message id", "c", "messaging.message.id", s.Envelope.ID},
		{"consumer conversation", "c", "messaging.message.conversation_id", "conv-1"},
		{"consumer outcome", "c", "messaging.acemq.outcome", "acked"},
		{"consumer attempt", "c", "messaging.acemq.attempt", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			span := p
			if tc.span == "c" {
				span = c
			}
			assert.Equal(t, tc.want, attr(span, tc.key))
		})
	}
	assert.Equal(t, trace.SpanKindProducer, p.SpanKind())
	assert.Equal(t, codes.Unset, c.Status().Code)
	assert.NotEmpty(t, s.Envelope.Headers["traceparent"], "the trace context travels in the headers")
}

func TestPlainPublisherOpensNoSpan(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	q := acemqtest.QueueName(t, "plain")
	require.NoError(t, r.conn.Declare(ctxT(t), acemq.Queue{Name: q}))
	t.Cleanup(func() { _ = r.conn.Transport().DeleteQueue(context.Background(), q) })

	ctx, caller := r.tp.Tracer("test").Start(ctxT(t), "caller")
	require.NoError(t, acemq.NewPublisher[OrderPlaced](r.conn, "", q).Send(ctx, OrderPlaced{OrderID: "A-2"}))
	caller.End()

	spans := r.ended("")
	require.Len(t, spans, 1, "only the caller's span")
	assert.Equal(t, "caller", spans[0].Name())
	assert.Empty(t, attr(spans[0], "messaging.message.id"), "the interceptor leaves a span it did not open alone")

	d, ok, err := r.conn.Transport().Get(ctxT(t), q)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, d.Ack())
	tp, _ := d.Headers["traceparent"].(string)
	assert.Contains(t, tp, caller.SpanContext().TraceID().String(), "the caller's trace context still travels")
}

func TestRetriedThenAckedInOneTrace(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	q := acemqtest.QueueName(t, "retry")
	r.consume(t, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		if m.Envelope.Attempt == 1 {
			return acemq.Retry(errors.New("the warehouse is busy"))
		}
		return acemq.Done()
	})
	require.NoError(t, otel.NewPublisher[OrderPlaced](r.tracing, r.conn, "", q).Send(ctxT(t), OrderPlaced{}))
	require.Equal(t, acemq.OutcomeRetried, r.next(t).Outcome)
	require.Equal(t, acemq.OutcomeAcked, r.next(t).Outcome)

	producer := r.ended("producer")
	consumers := r.ended("consumer")
	require.Len(t, producer, 1)
	require.Len(t, consumers, 2)
	for i, want := range []struct{ outcome, attempt, reason string }{
		{"retried", "1", "the warehouse is busy"},
		{"acked", "2", ""},
	} {
		c := consumers[i]
		assert.Equal(t, want.outcome, attr(c, "messaging.acemq.outcome"), "span %d", i)
		assert.Equal(t, want.attempt, attr(c, "messaging.acemq.attempt"), "span %d", i)
		assert.Equal(t, want.reason, attr(c, "messaging.acemq.reason"), "span %d", i)
		assert.Equal(t, codes.Unset, c.Status().Code, "a retry is not an error")
		assert.Equal(t, producer[0].SpanContext().TraceID(), c.SpanContext().TraceID(), "span %d", i)
		assert.Equal(t, producer[0].SpanContext().SpanID(), c.Parent().SpanID(), "span %d", i)
	}
}

func TestRefusedByAnInterceptorHasNoConsumerSpan(t *testing.T) {
	t.Parallel()
	refuse := errors.New("tenant beta is not served here")
	r := newRig(t, acemq.WithConsumeInterceptor(func(context.Context, *acemq.ConsumeContext) error { return refuse }))
	q := acemqtest.QueueName(t, "refused")
	ran := make(chan struct{}, 1)
	r.consume(t, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		ran <- struct{}{}
		return acemq.Done()
	})
	require.NoError(t, otel.NewPublisher[OrderPlaced](r.tracing, r.conn, "", q).Send(ctxT(t), OrderPlaced{}))
	s := r.next(t)
	assert.Equal(t, acemq.OutcomeDeadLettered, s.Outcome, "OnSettled still fires")
	assert.Contains(t, s.Reason, refuse.Error())
	assert.Empty(t, ran, "the handler did not run")
	assert.Empty(t, r.ended("consumer"), "the chain ran before the span could exist")
	assert.Len(t, r.ended("producer"), 1)
}

func TestErrorStatusByOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		handle  acemq.Handler[OrderPlaced]
		outcome acemq.Outcome
		status  codes.Code
	}{
		{"done", func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() },
			acemq.OutcomeAcked, codes.Unset},
		{"reject", func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
			return acemq.Reject(errors.New("no such customer"))
		}, acemq.OutcomeRejected, codes.Error},
		{"fatal", func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
			return acemq.AckOf(acemq.Fatal(errors.New("the order is corrupt")))
		}, acemq.OutcomeDeadLettered, codes.Error},
		{"attempts spent", func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
			return acemq.Retry(errors.New("still busy"))
		}, acemq.OutcomeDeadLettered, codes.Error},
		{"panic", func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { panic("boom") },
			acemq.OutcomeRejected, codes.Error},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			q := acemqtest.QueueName(t, "status")
			r.consume(t, q, tc.handle)
			require.NoError(t, otel.NewPublisher[OrderPlaced](r.tracing, r.conn, "", q).Send(ctxT(t), OrderPlaced{}))
			var last acemq.Settlement
			for last.Outcome == "" || last.Outcome == acemq.OutcomeRetried {
				last = r.next(t)
			}
			require.Equal(t, tc.outcome, last.Outcome)
			consumers := r.ended("consumer")
			require.NotEmpty(t, consumers)
			c := consumers[len(consumers)-1]
			assert.Equal(t, string(tc.outcome), attr(c, "messaging.acemq.outcome"))
			assert.Equal(t, tc.status, c.Status().Code)
			if tc.status == codes.Error {
				assert.Equal(t, last.Reason, c.Status().Description)
			}
		})
	}
}

func TestSendAllOpensOneSpanPerMessage(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	q := acemqtest.QueueName(t, "batch")
	require.NoError(t, r.conn.Declare(ctxT(t), acemq.Queue{Name: q}))
	ctx, parent := r.tp.Tracer("test").Start(ctxT(t), "batch")
	results := otel.NewPublisher[OrderPlaced](r.tracing, r.conn, "", q).
		SendAll(ctx, []OrderPlaced{{OrderID: "1"}, {OrderID: "2"}, {OrderID: "3"}})
	parent.End()
	ids := map[string]bool{}
	for _, res := range results {
		require.NoError(t, res.Err)
		ids[res.ID] = true
	}
	producers := r.ended("producer")
	require.Len(t, producers, 3)
	for _, p := range producers {
		assert.True(t, ids[attr(p, "messaging.message.id")], "span of an ID SendAll reported")
		delete(ids, attr(p, "messaging.message.id"))
		assert.Equal(t, parent.SpanContext().SpanID(), p.Parent().SpanID())
	}
	assert.Empty(t, ids, "one span per message")
}

func TestFailedSendHasErrorStatus(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	err := otel.NewPublisher[OrderPlaced](r.tracing, r.conn, "", acemqtest.QueueName(t, "nobody")).Send(ctxT(t), OrderPlaced{})
	require.ErrorIs(t, err, acemq.ErrUnroutable)
	producers := r.ended("producer")
	require.Len(t, producers, 1)
	assert.Equal(t, codes.Error, producers[0].Status().Code)
	assert.NotEmpty(t, attr(producers[0], "messaging.message.id"))
}

func TestPropagators(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		opts        []otel.Option
		wantBaggage bool
	}{
		{"default is TraceContext and Baggage", nil, true},
		{"WithPropagator replaces it", []otel.Option{otel.WithPropagator(propagation.TraceContext{})}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			tracing := otel.New(append([]otel.Option{otel.WithTracerProvider(r.tp)}, tc.opts...)...)
			pc := &acemq.PublishContext{Envelope: &acemq.Envelope{ID: "m-1"}}
			member, err := baggage.NewMember("tenant", "alpha")
			require.NoError(t, err)
			bag, err := baggage.New(member)
			require.NoError(t, err)
			ctx, span := r.tp.Tracer("test").Start(baggage.ContextWithBaggage(ctxT(t), bag), "caller")
			defer span.End()
			require.NoError(t, tracing.PublishInterceptor()(ctx, pc))
			assert.Contains(t, pc.Envelope.Headers["traceparent"], span.SpanContext().TraceID().String())
			_, hasBaggage := pc.Envelope.Headers["baggage"]
			assert.Equal(t, tc.wantBaggage, hasBaggage)
		})
	}
}

// With a no-op tracer provider (the global default) nothing is recorded
// and nothing fails.
func TestNoopProvider(t *testing.T) {
	t.Parallel()
	tracing := otel.New(otel.WithTracerProvider(noop.NewTracerProvider()))
	c := connectPlain(t, acemq.WithPublishInterceptor(tracing.PublishInterceptor()))
	q := acemqtest.QueueName(t, "noop")
	got := make(chan *acemq.Envelope, 1)
	cons, err := acemq.NewConsumer(c, q, otel.Handle(tracing, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		got <- m.Envelope
		return acemq.Done()
	}))
	require.NoError(t, err)
	runConsumer(t, cons)
	pub := otel.NewPublisher[OrderPlaced](tracing, c, "", q)
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{}))
	for _, r := range pub.SendAll(ctxT(t), []OrderPlaced{{}, {}}) {
		require.NoError(t, r.Err)
	}
	for range 3 {
		<-got
	}
}

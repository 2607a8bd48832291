package acemq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Refund is the second type of the tests that put two on one queue.
type Refund struct {
	OrderID string `json:"orderId"`
	Cents   int64  `json:"cents"`
}

func TestConsumerChecksTypes(t *testing.T) {
	t.Parallel()
	policy := acemq.RetryPolicy{MaxAttempts: 2, Delays: []time.Duration{50 * time.Millisecond}}
	onBrokers(t, func(t *testing.T, url string) {
		got, opt := newSettlements()
		c := connectURL(t, url, opt, acemq.WithRetryPolicy(policy))
		q := consumerQueue(t, url, policy)
		handled := make(chan *acemq.Message[OrderPlaced], 8)
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			handled <- m
			return acemq.Done()
		}, acemq.AcceptTypes("OrderPlacedV0"))
		require.NoError(t, err)
		run(t, cons)

		// Another type: parked, never decoded into a zero OrderPlaced.
		require.NoError(t, acemq.NewPublisher[Refund](c, "", q).Send(ctxT(t), Refund{OrderID: "R-1"}, acemq.MessageID("refund")))
		s := got.next(t)
		assert.Equal(t, acemq.OutcomeParked, s.Outcome)
		assert.Equal(t, `the message is of type "Refund"; this consumer takes "OrderPlaced" or "OrderPlacedV0"`, s.Reason)
		assert.Equal(t, acemq.AckNone, s.Ack.Kind(), "the handler did not run")
		p := take(t, c, acemq.ParkingQueue(q))
		assert.Equal(t, "refund", p.MessageID)
		assert.JSONEq(t, `{"orderId":"R-1","cents":0}`, string(p.Body), "the body is parked as it came")

		// Its own type, a type AcceptTypes names, and no type at all: handled.
		require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "own"}))
		require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q, acemq.TypeName("OrderPlacedV0")).Send(ctxT(t), OrderPlaced{OrderID: "accepted"}))
		require.NoError(t, c.Transport().Publish(ctxT(t), transport.Message{RoutingKey: q, ContentType: "application/json", Body: []byte(`{"orderId":"untyped"}`)}))
		for _, want := range []string{"own", "accepted", "untyped"} {
			assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome, want)
			select {
			case m := <-handled:
				assert.Equal(t, want, m.Payload.OrderID)
			case <-time.After(5 * time.Second):
				t.Fatalf("the handler did not get %q", want)
			}
		}
		got.none(t)
	})
}

func TestRawConsumerTakesEveryType(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	c := connect(t, opt)
	q := acemqtestQueue(t)
	types := make(chan string, 4)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[acemq.Raw]) acemq.Ack {
		types <- m.Envelope.Type
		return acemq.Done()
	})
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[Refund](c, "", q).Send(ctxT(t), Refund{}))
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	for _, want := range []string{"Refund", "OrderPlaced"} {
		assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
		assert.Equal(t, want, <-types)
	}
}

func TestAcceptTypesRefusesAnEmptyName(t *testing.T) {
	t.Parallel()
	_, err := acemq.NewConsumer(connect(t), acemqtestQueue(t), func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() },
		acemq.AcceptTypes(""))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "AcceptTypes was given an empty name")
	assert.Equal(t, 1, countPrefix(err.Error()), "one acemq: prefix: %s", err)
}

func TestRouter(t *testing.T) {
	t.Parallel()
	policy := acemq.RetryPolicy{MaxAttempts: 2, Delays: []time.Duration{50 * time.Millisecond}}
	onBrokers(t, func(t *testing.T, url string) {
		got, opt := newSettlements()
		var chainSaw atomic.Int32
		c := connectURL(t, url, opt, acemq.WithRetryPolicy(policy),
			acemq.WithConsumeInterceptor(func(_ context.Context, cc *acemq.ConsumeContext) error {
				chainSaw.Add(1)
				if cc.Envelope.Headers["x-tenant"] == "beta" {
					return errors.New("wrong tenant")
				}
				return nil
			}))
		q := consumerQueue(t, url, policy)
		r := acemq.NewRouter(c, q, acemq.Concurrency(2))
		orders := make(chan OrderPlaced, 4)
		acemq.Route(r, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			orders <- m.Payload
			return acemq.Done()
		})
		acemq.Route(r, func(_ context.Context, m *acemq.Message[Refund]) acemq.Ack {
			if m.Envelope.Attempt < 2 {
				return acemq.Retry(errors.New("the ledger is busy"))
			}
			return acemq.Done()
		}, acemq.TypeName("RefundIssued"))
		run(t, r)

		// Routed by type, each to its own handler and payload type.
		require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "A-1", TotalCents: 500}))
		assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
		assert.Equal(t, OrderPlaced{OrderID: "A-1", TotalCents: 500}, <-orders)

		// The ladder is a Consumer's: retried through the tier, then acked.
		require.NoError(t, acemq.NewPublisher[Refund](c, "", q, acemq.TypeName("RefundIssued")).Send(ctxT(t), Refund{OrderID: "A-1"}))
		s := got.next(t)
		assert.Equal(t, acemq.OutcomeRetried, s.Outcome)
		assert.Equal(t, 50*time.Millisecond, s.Delay)
		assert.Equal(t, acemq.AckRetry, s.Ack.Kind())
		s = got.next(t)
		assert.Equal(t, acemq.OutcomeAcked, s.Outcome)
		assert.Equal(t, 2, s.Attempt)

		// A type no route takes, and one without a type: parked.
		require.NoError(t, acemq.NewPublisher[Refund](c, "", q).Send(ctxT(t), Refund{}, acemq.MessageID("stray")))
		s = got.next(t)
		assert.Equal(t, acemq.OutcomeParked, s.Outcome)
		assert.Equal(t, `no handler for type "Refund" on queue "`+q+`"`, s.Reason)
		assert.Equal(t, "stray", take(t, c, acemq.ParkingQueue(q)).MessageID)
		require.NoError(t, c.Transport().Publish(ctxT(t), transport.Message{RoutingKey: q, ContentType: "application/json", Body: []byte(`{}`)}))
		s = got.next(t)
		assert.Equal(t, acemq.OutcomeParked, s.Outcome)
		assert.Equal(t, `no handler for type "" on queue "`+q+`"`, s.Reason)

		// The interceptors are a Consumer's: a refusal dead-letters.
		require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}, acemq.Header("x-tenant", "beta")))
		s = got.next(t)
		assert.Equal(t, acemq.OutcomeDeadLettered, s.Outcome)
		assert.Equal(t, "an interceptor refused it: wrong tenant", s.Reason)
		take(t, c, acemq.DeadLetterQueue(q))
		got.none(t)
		assert.EqualValues(t, 6, chainSaw.Load(), "the chain saw every delivery, the retried one twice")
	})
}

func TestRouterRunFailsOnBadRoutes(t *testing.T) {
	t.Parallel()
	c := connect(t)
	h := func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() }
	for _, tc := range []struct {
		name  string
		setup func(r *acemq.Router)
		opts  []acemq.ConsumerOption
		want  string
	}{
		{name: "no routes", setup: func(*acemq.Router) {}, want: "has no routes"},
		{name: "a type routed twice", setup: func(r *acemq.Router) {
			acemq.Route(r, h)
			acemq.Route(r, func(context.Context, *acemq.Message[Refund]) acemq.Ack { return acemq.Done() }, acemq.TypeName("OrderPlaced"))
		}, want: `type "OrderPlaced" is routed twice`},
		{name: "a nil handler", setup: func(r *acemq.Router) { acemq.Route[OrderPlaced](r, nil) }, want: `the route for type "OrderPlaced" has a nil handler`},
		{name: "an empty TypeName", setup: func(r *acemq.Router) { acemq.Route(r, h, acemq.TypeName("")) }, want: "empty TypeName"},
		{name: "a bad option", setup: func(r *acemq.Router) { acemq.Route(r, h) }, opts: []acemq.ConsumerOption{acemq.Concurrency(0)}, want: "Concurrency(0)"},
		{name: "AcceptTypes", setup: func(r *acemq.Router) { acemq.Route(r, h) }, opts: []acemq.ConsumerOption{acemq.AcceptTypes("X")}, want: "give a route TypeName instead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := acemq.NewRouter(c, acemqtestQueue(t), tc.opts...)
			tc.setup(r)
			err := r.Run(ctxT(t))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 1, countPrefix(err.Error()), "one acemq: prefix: %s", err)
		})
	}
	t.Run("a nil Conn", func(t *testing.T) {
		t.Parallel()
		err := acemq.NewRouter(nil, "q").Run(ctxT(t))
		assert.ErrorContains(t, err, "nil Conn")
	})
}

func TestRouterRunsOnceAtATimeAndStopsOnShutdown(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := acemqtestQueue(t)
	r := acemq.NewRouter(c, q)
	handled := make(chan struct{}, 1)
	acemq.Route(r, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		handled <- struct{}{}
		return acemq.Done()
	})
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	<-handled
	assert.ErrorContains(t, r.Run(ctxT(t)), "already running")
	require.NoError(t, c.Shutdown(ctxT(t)))
	assert.ErrorIs(t, <-done, acemq.ErrClosed)
}

// TestNewRouterChecksOptionsBeforeDeclaring: an invalid option fails every
// Run and NewRouter declared nothing.
func TestNewRouterChecksOptionsBeforeDeclaring(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := acemqtestQueue(t)
	r := acemq.NewRouter(c, q, acemq.AcceptTypes("Old"))
	acemq.Route(r, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
	for range 2 {
		assert.ErrorContains(t, r.Run(ctxT(t)), "AcceptTypes")
	}
	_, err := c.Transport().Inspect(ctxT(t), q)
	assert.ErrorIs(t, err, acemq.ErrNotFound, "NewRouter declared %s", q)
}

// TestRouterDeclaresAgainAtRun: a Router whose declaration failed (its
// queue exists with other arguments) reports that from Run, and once the
// queue is fixed its next Run declares the ladder and consumes.
func TestRouterDeclaresAgainAtRun(t *testing.T) {
	t.Parallel()
	got, hook := newSettlements()
	c := connect(t, hook, acemq.WithRetryPolicy(fastRetry))
	q := acemqtestQueue(t)
	require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: q, Args: map[string]any{"x-max-length": int64(5)}}))
	r := acemq.NewRouter(c, q)
	acemq.Route(r, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
	err := r.Run(ctxT(t))
	require.ErrorIs(t, err, acemq.ErrTopologyConflict)

	require.NoError(t, c.Transport().DeleteQueue(ctxT(t), q)) // the operator fixes the queue
	run(t, r)
	require.Eventually(t, func() bool {
		info, err := c.Transport().Inspect(ctxT(t), q)
		return err == nil && info.Consumers > 0
	}, 10*time.Second, 5*time.Millisecond, "Run declared and consumes %s", q)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "1"}))
	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	_, err = c.Transport().Inspect(ctxT(t), acemq.RetryQueue(q, fastRetry.Delays[1]))
	assert.NoError(t, err, "Run declared the ladder")
}

package acemq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNilInterceptorFailsConnect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  acemq.ConnOption
	}{
		{"publish", acemq.WithPublishInterceptor(nil)},
		{"consume", acemq.WithConsumeInterceptor(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := acemq.Connect(context.Background(), "memory://", tc.opt)
			require.Error(t, err)
			assert.Equal(t, "acemq: the interceptor is nil", err.Error())
		})
	}
}

func TestUnsupportedScheme(t *testing.T) {
	t.Parallel()
	_, err := acemq.Connect(context.Background(), "x://user:secret@host/")
	require.EqualError(t, err, `acemq: unsupported URL scheme "x" (want amqp, amqps or memory)`)
}

func TestPublishChainRunsInOrder(t *testing.T) {
	t.Parallel()
	var order []string
	stamp := func(name string) acemq.PublishInterceptor {
		return func(_ context.Context, c *acemq.PublishContext) error {
			order = append(order, name)
			c.SetHeader("x-trail", fmt.Sprint(c.Envelope.Headers["x-trail"])+name)
			return nil
		}
	}
	c := connect(t, acemq.WithPublishInterceptor(stamp("a")), acemq.WithPublishInterceptor(stamp("b")), acemq.WithPublishInterceptor(stamp("c")))
	q := declareQueue(t, c)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "1"}))
	assert.Equal(t, []string{"a", "b", "c"}, order)
	d := take(t, c, q)
	assert.Equal(t, "<nil>abc", d.Headers["x-trail"])
}

func TestPublishRefusalIsReturnedUnwrappedAndStopsTheChain(t *testing.T) {
	t.Parallel()
	errTooBig := errors.New("too big to publish")
	var laterRan atomic.Bool
	c := connect(t,
		acemq.WithPublishInterceptor(func(context.Context, *acemq.PublishContext) error { return errTooBig }),
		acemq.WithPublishInterceptor(func(context.Context, *acemq.PublishContext) error { laterRan.Store(true); return nil }))
	q := declareQueue(t, c)
	err := acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{})
	assert.True(t, err == errTooBig, "Send returned %v, want the interceptor's very error", err)
	assert.False(t, laterRan.Load(), "an interceptor after the refusing one ran")
	empty(t, c, q)
}

func TestPublishInterceptorCanRedirect(t *testing.T) {
	t.Parallel()
	c := connect(t, acemq.WithPublishInterceptor(func(_ context.Context, p *acemq.PublishContext) error {
		if o, ok := p.Payload.(OrderPlaced); ok && o.TotalCents > 1000 {
			p.RoutingKey += ".review"
		}
		return nil
	}))
	q := declareQueue(t, c)
	review := declareQueueNamed(t, c, q+".review")
	pub := acemq.NewPublisher[OrderPlaced](c, "", q)
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "big", TotalCents: 5000}))
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "small", TotalCents: 5}))
	assert.Contains(t, string(take(t, c, review).Body), `"big"`)
	assert.Contains(t, string(take(t, c, q).Body), `"small"`)
}

func TestPublishInterceptorPayloadReplacement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		replacement any
		want        string
	}{
		{"a value of T is encoded", OrderPlaced{OrderID: "redacted"}, "redacted"},
		{"a value of another type is ignored", map[string]any{"orderId": "x"}, "original"},
		{"nil is ignored", nil, "original"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := connect(t, acemq.WithPublishInterceptor(func(_ context.Context, p *acemq.PublishContext) error {
				p.Payload = tc.replacement
				return nil
			}))
			q := declareQueue(t, c)
			require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "original"}))
			var got OrderPlaced
			require.NoError(t, json.Unmarshal(take(t, c, q).Body, &got))
			assert.Equal(t, tc.want, got.OrderID)
		})
	}
}

func TestReservedHeaders(t *testing.T) {
	t.Parallel()
	t.Run("Header refuses the namespace", func(t *testing.T) {
		t.Parallel()
		c := connect(t)
		q := declareQueue(t, c)
		err := acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}, acemq.Header("x-acemq-id", "mine"))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "x-acemq-")
		assert.Contains(t, err.Error(), "reserved")
		empty(t, c, q)
	})
	t.Run("SetHeader is accepted and dropped at render", func(t *testing.T) {
		t.Parallel()
		c := connect(t, acemq.WithPublishInterceptor(func(_ context.Context, p *acemq.PublishContext) error {
			p.SetHeader("x-acemq-id", "forged")
			p.SetHeader("X-Acemq-Origin", "forged")
			p.SetHeader("x-tenant", "alpha")
			return nil
		}))
		q := declareQueue(t, c)
		require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}, acemq.MessageID("real-id")))
		d := take(t, c, q)
		assert.Equal(t, "real-id", d.MessageID)
		assert.Equal(t, map[string]any{"x-tenant": "alpha"}, d.Headers, "the reserved names are dropped")
	})
}

func TestSetHeaderCreatesTheMap(t *testing.T) {
	t.Parallel()
	var pc acemq.PublishContext
	pc.SetHeader("x-a", 1)
	assert.Equal(t, 1, pc.Envelope.Headers["x-a"])
	pc = acemq.PublishContext{Envelope: &acemq.Envelope{}}
	pc.SetHeader("x-b", "v")
	assert.Equal(t, "v", pc.Envelope.Headers["x-b"])
}

func TestConsumeChainOrderAndHeaderReachTheHandler(t *testing.T) {
	t.Parallel()
	var order []string
	mark := func(name string) acemq.ConsumeInterceptor {
		return func(_ context.Context, c *acemq.ConsumeContext) error {
			order = append(order, name)
			c.Envelope.Headers["x-seen-by"] = fmt.Sprint(c.Envelope.Headers["x-seen-by"]) + name
			return nil
		}
	}
	got, opt := newSettlements()
	c := connect(t, acemq.WithConsumeInterceptor(mark("1")), acemq.WithConsumeInterceptor(mark("2")), opt)
	q := acemqtestQueue(t)
	seen := make(chan any, 1)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		seen <- m.Envelope.Headers["x-seen-by"]
		return acemq.Done()
	})
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	assert.Equal(t, "<nil>12", <-seen)
	assert.Equal(t, []string{"1", "2"}, order)
}

func TestConsumeBodyAndContentTypeRewritesChangeNothing(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	c := connect(t, opt, acemq.WithConsumeInterceptor(func(_ context.Context, cc *acemq.ConsumeContext) error {
		cc.Body = []byte(`{"orderId":"rewritten"}`)
		cc.ContentType = "text/plain"
		return nil
	}))
	q := acemqtestQueue(t)
	seen := make(chan string, 1)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		seen <- m.Payload.OrderID
		return acemq.Done()
	})
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "original"}))
	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	assert.Equal(t, "original", <-seen)
}

func TestConsumeRefusalDeadLettersWithoutRetries(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	var laterRan atomic.Bool
	c := connect(t, opt, acemq.WithRetryPolicy(fastRetry),
		acemq.WithConsumeInterceptor(func(_ context.Context, cc *acemq.ConsumeContext) error {
			cc.Envelope.Headers["x-received"] = "yes"
			if tenant, _ := cc.Envelope.Headers["x-tenant"].(string); tenant != "alpha" {
				return fmt.Errorf("tenant %q is not served by this process", tenant)
			}
			return nil
		}),
		acemq.WithConsumeInterceptor(func(context.Context, *acemq.ConsumeContext) error { laterRan.Store(true); return nil }))
	q := acemqtestQueue(t)
	var handled atomic.Int32
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		handled.Add(1)
		return acemq.Done()
	})
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}, acemq.Header("x-tenant", "beta")))

	s := got.next(t)
	assert.Equal(t, acemq.OutcomeDeadLettered, s.Outcome)
	assert.Equal(t, `an interceptor refused it: tenant "beta" is not served by this process`, s.Reason)
	assert.True(t, s.DeadLetters())
	assert.Equal(t, 1, s.Attempt)
	assert.Equal(t, acemq.Ack{}, s.Ack, "the handler did not run, so there is no Ack")
	got.none(t)
	assert.Zero(t, handled.Load())
	assert.False(t, laterRan.Load())

	dl := take(t, c, acemq.DeadLetterQueue(q))
	assert.Equal(t, s.Reason, dl.Headers["x-acemq-error"])
	assert.Equal(t, "yes", dl.Headers["x-received"], "a header the interceptor added reaches the dead letter")
	assert.NotContains(t, dl.Headers, "x-acemq-attempt", "a first attempt carries no attempt header")
	for _, tier := range []string{acemq.RetryQueue(q, fastRetry.Delays[0]), acemq.RetryQueue(q, fastRetry.Delays[1])} {
		empty(t, c, tier)
	}
}

func TestInterceptorPanicsAreRecovered(t *testing.T) {
	t.Parallel()
	t.Run("consume: a refusal with the panic's value", func(t *testing.T) {
		t.Parallel()
		got, opt := newSettlements()
		c := connect(t, opt, acemq.WithConsumeInterceptor(func(context.Context, *acemq.ConsumeContext) error { panic("boom") }))
		q := acemqtestQueue(t)
		cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
		require.NoError(t, err)
		run(t, cons)
		pub := acemq.NewPublisher[OrderPlaced](c, "", q)
		for range 2 { // the worker survives the first
			require.NoError(t, pub.Send(ctxT(t), OrderPlaced{}))
			s := got.next(t)
			assert.Equal(t, acemq.OutcomeDeadLettered, s.Outcome)
			assert.Equal(t, "an interceptor panicked: boom", s.Reason)
		}
	})
	t.Run("publish: Send returns an error", func(t *testing.T) {
		t.Parallel()
		c := connect(t, acemq.WithPublishInterceptor(func(context.Context, *acemq.PublishContext) error { panic("kaput") }))
		q := declareQueue(t, c)
		err := acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "acemq: a publish interceptor panicked: kaput")
		empty(t, c, q)
	})
}

func TestUndecodableBodyReachesTheChainThenIsParked(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	var sawBody atomic.Value
	c := connect(t, opt, acemq.WithConsumeInterceptor(func(_ context.Context, cc *acemq.ConsumeContext) error {
		sawBody.Store(string(cc.Body))
		return nil
	}))
	q := acemqtestQueue(t)
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		t.Error("the handler ran for an undecodable body")
		return acemq.Done()
	})
	require.NoError(t, err)
	run(t, cons)
	raw := acemq.NewPublisher[acemq.Raw](c, "", q, acemq.ContentType("application/json"))
	require.NoError(t, raw.Send(ctxT(t), acemq.Raw("not json")))

	s := got.next(t)
	assert.Equal(t, acemq.OutcomeParked, s.Outcome)
	assert.False(t, s.DeadLetters())
	assert.True(t, strings.HasPrefix(s.Reason, "the body does not decode as application/json into OrderPlaced"), s.Reason)
	assert.Equal(t, "not json", sawBody.Load())
	parked := take(t, c, acemq.ParkingQueue(q))
	assert.Equal(t, "not json", string(parked.Body))
	assert.Equal(t, s.Reason, parked.Headers["x-acemq-error"])
}

func TestSendAllRunsTheChainConcurrentlyWithResultsInOrder(t *testing.T) {
	t.Parallel()
	errOdd := errors.New("odd orders are refused")
	var (
		mu      sync.Mutex
		inChain int
		maxSeen int
	)
	c := connect(t, acemq.WithPublishInterceptor(func(_ context.Context, p *acemq.PublishContext) error {
		mu.Lock()
		inChain++
		maxSeen = max(maxSeen, inChain)
		mu.Unlock()
		defer func() { mu.Lock(); inChain--; mu.Unlock() }()
		time.Sleep(time.Millisecond) // long enough for the batch to overlap
		if p.Payload.(OrderPlaced).TotalCents%2 == 1 {
			return errOdd
		}
		return nil
	}))
	q := declareQueue(t, c)
	orders := make([]OrderPlaced, 400)
	for i := range orders {
		orders[i] = OrderPlaced{OrderID: fmt.Sprint(i), TotalCents: int64(i)}
	}
	results := acemq.NewPublisher[OrderPlaced](c, "", q).SendAll(ctxT(t), orders)
	require.Len(t, results, len(orders))
	ids := map[string]bool{}
	for i, r := range results {
		if i%2 == 1 {
			assert.True(t, r.Err == errOdd, "result %d: %v, want the interceptor's very error", i, r.Err)
			continue
		}
		require.NoError(t, r.Err, "result %d", i)
		ids[r.ID] = true
	}
	info, err := c.Transport().Inspect(ctxT(t), q)
	require.NoError(t, err)
	assert.Equal(t, 200, info.Messages)
	assert.Len(t, ids, 200, "every confirmed message has an ID of its own")
	// The message with result i carries payload i: results are in payload order.
	for range 200 {
		d := take(t, c, q)
		var o OrderPlaced
		require.NoError(t, json.Unmarshal(d.Body, &o))
		assert.Equal(t, o.OrderID, fmt.Sprint(o.TotalCents))
		assert.Equal(t, results[o.TotalCents].ID, d.MessageID)
	}
	assert.Greater(t, maxSeen, 1, "the chain never ran concurrently")
}

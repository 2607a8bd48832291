package acemq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
)

// TestKeyOnTheWire: Key travels as the header x-acemq-key, and only when
// set.
func TestKeyOnTheWire(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := declareQueue(t, c)
	pub := acemq.NewPublisher[OrderPlaced](c, "", q)
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "1"}, acemq.Key("order-1")))
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "2"}))
	assert.Equal(t, map[string]any{"x-acemq-key": "order-1"}, take(t, c, q).Headers)
	assert.Empty(t, take(t, c, q).Headers, "no key, no header")
}

// TestKeyBy: the publisher's function keys every payload of Send and
// SendAll; a Key given to one Send wins; an empty key is no key.
func TestKeyBy(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := declareQueue(t, c)
	pub := acemq.NewPublisher[OrderPlaced](c, "", q, acemq.KeyBy(func(o OrderPlaced) string { return o.OrderID }))
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "A-1"}))
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "A-1"}, acemq.Key("given")))
	for _, r := range pub.SendAll(ctxT(t), []OrderPlaced{{OrderID: "B-1"}, {OrderID: ""}, {OrderID: "B-3"}}) {
		require.NoError(t, r.Err)
	}
	var keys []string
	for range 5 {
		env, err := acemq.EnvelopeOf(take(t, c, q).Message)
		require.NoError(t, err)
		keys = append(keys, env.Key)
	}
	assert.Equal(t, []string{"A-1", "given", "B-1", "", "B-3"}, keys)
}

// TestKeyByOfAnotherType: a KeyBy for another type fails every Send and
// every payload of SendAll, naming both types, and sends nothing.
func TestKeyByOfAnotherType(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := declareQueue(t, c)
	pub := acemq.NewPublisher[OrderPlaced](c, "", q, acemq.KeyBy(func(r Refund) string { return r.OrderID }))
	err := pub.Send(ctxT(t), OrderPlaced{OrderID: "1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "OrderPlaced")
	assert.Contains(t, err.Error(), "Refund")
	for _, r := range pub.SendAll(ctxT(t), []OrderPlaced{{OrderID: "1"}, {OrderID: "2"}}) {
		require.Error(t, r.Err)
		assert.Contains(t, r.Err.Error(), "KeyBy")
	}
	empty(t, c, q)
}

// TestKeyIsChecked: a key longer than 255 bytes or not UTF-8 fails Send
// with the reason, whether an option or an interceptor set it.
func TestKeyIsChecked(t *testing.T) {
	t.Parallel()
	c := connect(t, acemq.WithPublishInterceptor(func(_ context.Context, pc *acemq.PublishContext) error {
		if pc.Envelope.Key == "bad-by-interceptor" {
			pc.Envelope.Key = "\xff"
		}
		return nil
	}))
	q := declareQueue(t, c)
	pub := acemq.NewPublisher[OrderPlaced](c, "", q)
	err := pub.Send(ctxT(t), OrderPlaced{}, acemq.Key(strings.Repeat("k", 256)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Key is 256 bytes")
	err = pub.Send(ctxT(t), OrderPlaced{}, acemq.Key("bad-by-interceptor"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Key is not valid UTF-8")
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{}, acemq.Key(strings.Repeat("k", 255))))
}

// TestInterceptorSetsKey: a publish interceptor may key a message.
func TestInterceptorSetsKey(t *testing.T) {
	t.Parallel()
	c := connect(t, acemq.WithPublishInterceptor(func(_ context.Context, pc *acemq.PublishContext) error {
		if o, ok := pc.Payload.(OrderPlaced); ok {
			pc.Envelope.Key = "tenant/" + o.OrderID
		}
		return nil
	}))
	q := declareQueue(t, c)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "7"}))
	env, err := acemq.EnvelopeOf(take(t, c, q).Message)
	require.NoError(t, err)
	assert.Equal(t, "tenant/7", env.Key)
}

// TestKeyKeptByMoves: a retried message keeps its key on the next attempt,
// and so does the one that ends in the dlq.
func TestKeyKeptByMoves(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := acemqtestQueue(t)
	keys := make(chan string, 4)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		keys <- m.Envelope.Key
		return acemq.Retry(assert.AnError)
	}, acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 2, Delays: []time.Duration{10 * time.Millisecond}}))
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}, acemq.Key("k-9")))
	for range 2 {
		select {
		case k := <-keys:
			assert.Equal(t, "k-9", k)
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery")
		}
	}
	d := take(t, c, acemq.DeadLetterQueue(q))
	env, err := acemq.EnvelopeOf(d.Message)
	require.NoError(t, err)
	assert.Equal(t, "k-9", env.Key)
}

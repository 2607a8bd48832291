package acemq_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
)

// A SendKey's value is read back from the options, the last one under the
// key winning; another key, even of the same name, does not see it, and
// the engine sends the message as if the option were not there.
func TestSendKeyCarriesItsValue(t *testing.T) {
	k := acemq.NewSendKey[int]("n")
	other := acemq.NewSendKey[int]("n")
	opts := []acemq.SendOption{k.Option(1), acemq.MessageID("m"), k.Option(2)}

	v, ok := k.Value(opts)
	assert.True(t, ok)
	assert.Equal(t, 2, v)
	_, ok = other.Value(opts)
	assert.False(t, ok, "a second key of the same name read the first's value")
	_, ok = k.Value(nil)
	assert.False(t, ok)
	assert.Equal(t, "n", k.String())

	c := connect(t)
	q := declareQueue(t, c)
	require.NoError(t, acemq.NewPublisher[string](c, "", q).Send(ctxT(t), "x", opts...))
	assert.Equal(t, "m", take(t, c, q).MessageID)
}

type spanKey struct{}

// PerMessage gives each message its own context, seen by the publish
// chain, and reports each result once, with its ID, for Send as for
// SendAll.
func TestPerMessageGivesEachMessageItsContext(t *testing.T) {
	var (
		mu      sync.Mutex
		started int
		ended   = map[string]error{}
		seen    []any
	)
	start := func(ctx context.Context) (context.Context, func(string, error)) {
		mu.Lock()
		defer mu.Unlock()
		started++
		n := started
		return context.WithValue(ctx, spanKey{}, n), func(id string, err error) {
			mu.Lock()
			defer mu.Unlock()
			if _, twice := ended[id]; twice {
				t.Errorf("message %s ended twice", id)
			}
			ended[id] = err
		}
	}
	c := connect(t, acemq.WithPublishInterceptor(func(ctx context.Context, _ *acemq.PublishContext) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, ctx.Value(spanKey{}))
		return nil
	}))
	q := declareQueue(t, c)
	pub := acemq.NewPublisher[string](c, "", q)

	require.NoError(t, pub.Send(ctxT(t), "one", acemq.MessageID("a"), acemq.PerMessage(start)))
	res := pub.SendAll(ctxT(t), []string{"two", "three"}, acemq.PerMessage(start))
	for _, r := range res {
		require.NoError(t, r.Err)
	}

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 3, started)
	assert.ElementsMatch(t, []any{1, 2, 3}, seen, "the chain did not run with start's context")
	assert.Len(t, ended, 3)
	assert.Contains(t, ended, "a")
	for _, r := range res {
		assert.Contains(t, ended, r.ID)
	}
}

// ReservedHeader reaches the consumer's envelope, out of Headers, and
// refuses what is not an extension's reserved header.
func TestReservedHeaderTravels(t *testing.T) {
	c := connect(t)
	q := declareQueue(t, c)
	pub := acemq.NewPublisher[string](c, "", q)
	require.NoError(t, pub.Send(ctxT(t), "x", acemq.ReservedHeader("x-acemq-test-state", "s1")))
	env, err := acemq.EnvelopeOf(take(t, c, q).Message)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"x-acemq-test-state": "s1"}, env.Reserved())
	assert.NotContains(t, env.Headers, "x-acemq-test-state")

	for name, value := range map[string]any{
		"app-header":        "v",       // outside the namespace
		"x-acemq-attempt":   "7",       // a field's header
		"X-ACEMQ-KEY":       "k",       // a field's, in another case
		"x-acemq-test-chan": func() {}, // no AMQP table holds it
	} {
		err := pub.Send(ctxT(t), "x", acemq.ReservedHeader(name, value))
		assert.ErrorContains(t, err, "acemq: ", name)
		assert.Contains(t, err.Error(), name)
	}
	empty(t, c, q)
}

// SetReserved sets what Reserved reads, on a copy Reserved cannot change,
// and refuses what ReservedHeader refuses.
func TestSetReserved(t *testing.T) {
	e := &acemq.Envelope{ID: "m"}
	assert.Nil(t, e.Reserved())
	require.NoError(t, e.SetReserved("x-acemq-test-state", int32(3)))
	got := e.Reserved()
	assert.Equal(t, map[string]any{"x-acemq-test-state": int32(3)}, got)
	got["x-acemq-test-state"] = "changed"
	assert.Equal(t, int32(3), e.Reserved()["x-acemq-test-state"], "Reserved returned e's own map")
	assert.Equal(t, e.Reserved(), e.Clone().Reserved())

	assert.Error(t, e.SetReserved("plain", "v"))
	assert.Error(t, e.SetReserved("x-acemq-error", "v"))
	assert.Error(t, e.SetReserved("x-acemq-test-chan", make(chan int)))
	assert.Len(t, e.Reserved(), 1, "a refused header was set")
	var nilEnv *acemq.Envelope
	assert.Error(t, nilEnv.SetReserved("x-acemq-test-state", "v"))
	assert.Nil(t, nilEnv.Reserved())
}

// Logger is WithLogger's logger, or slog.Default() without one.
func TestConnLogger(t *testing.T) {
	l := slog.New(slog.DiscardHandler)
	assert.Same(t, l, connect(t, acemq.WithLogger(l)).Logger())
	c, err := acemq.Connect(ctxT(t), "memory://")
	require.NoError(t, err)
	defer c.Close()
	assert.Same(t, slog.Default(), c.Logger())
	var nilConn *acemq.Conn
	assert.Same(t, slog.Default(), nilConn.Logger())
}

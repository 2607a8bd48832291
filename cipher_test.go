package acemq_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/require"
)

// xorCipher is a BodyCipher for the engine's tests: not encryption, but it
// names a key, checks the associated data, and fails as a cipher does.
type xorCipher struct{}

func (x *xorCipher) Seal(_ context.Context, _ *acemq.Envelope, body, ad []byte) (string, []byte, error) {
	out := make([]byte, 0, len(body)+len(ad))
	for _, b := range body {
		out = append(out, b^0x5a)
	}
	return "k1", append(out, ad...), nil
}

func (x *xorCipher) Open(_ context.Context, _ *acemq.Envelope, keyID string, sealed, ad []byte) ([]byte, error) {
	switch {
	case keyID == "":
		return nil, errors.New("not sealed")
	case keyID != "k1":
		return nil, errors.New("no key " + keyID)
	case !bytes.HasSuffix(sealed, ad):
		return nil, errors.New("moved")
	}
	out := make([]byte, 0, len(sealed)-len(ad))
	for _, b := range sealed[:len(sealed)-len(ad)] {
		out = append(out, b^0x5a)
	}
	return out, nil
}

func TestWithBodyCipherOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []acemq.ConnOption
		want string
	}{
		{"nil", []acemq.ConnOption{acemq.WithBodyCipher(nil)}, "acemq: WithBodyCipher was given a nil cipher"},
		{"twice", []acemq.ConnOption{acemq.WithBodyCipher(&xorCipher{}), acemq.WithBodyCipher(&xorCipher{})}, "acemq: WithBodyCipher was given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := acemq.Connect(t.Context(), acemqtest.Memory(t), tc.opts...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestBodyCipherAroundClaimCheck: the seal runs before the claim check, so
// the stored body is the sealed one; the consumer loads, opens, decodes.
// The body on the queue and in the store is never the plain one.
func TestBodyCipherAroundClaimCheck(t *testing.T) {
	ctx := t.Context()
	store := newMapStore()
	got, onSettled := newSettlements()
	c := connect(t, acemq.WithBodyCipher(&xorCipher{}), acemq.WithBodyStore(store, 16), onSettled)
	q := declareQueue(t, c)
	payload := "a body long enough to be claim-checked, with SECRET in it"
	seen := make(chan string, 1)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[string]) acemq.Ack {
		seen <- m.Payload
		return acemq.Done()
	})
	require.NoError(t, err)
	m, err := acemq.NewPublisher[string](c, "", q).Prepare(ctx, payload)
	require.NoError(t, err)
	require.Equal(t, acemq.ClaimCheckContentType, m.ContentType)
	require.Equal(t, "k1", m.Envelope.Reserved()[acemq.CipherHeader])
	require.NoError(t, c.PublishRaw(ctx, m))
	store.mu.Lock()
	require.Len(t, store.bodies, 1)
	for _, b := range store.bodies {
		require.NotContains(t, string(b), "SECRET")
	}
	store.mu.Unlock()
	run(t, cons)
	require.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	require.Equal(t, payload, <-seen)
}

func TestOpenBody(t *testing.T) {
	ctx := t.Context()
	env := &acemq.Envelope{ID: "id-1", Type: "T"}
	_, err := acemq.OpenBody(ctx, nil, env, nil)
	require.ErrorContains(t, err, "acemq: OpenBody needs a cipher")
	_, err = acemq.OpenBody(ctx, &xorCipher{}, env, []byte("x"))
	require.EqualError(t, err, "acemq: the body does not open: not sealed")
	require.EqualError(t, env.SetReserved(acemq.CipherHeader, int32(7)), "header x-acemq-cipher-key is a int32, want a string")
	require.NoError(t, env.SetReserved(acemq.CipherHeader, "k2"))
	require.Equal(t, map[string]any{acemq.CipherHeader: "k2"}, env.Reserved())
	_, err = acemq.OpenBody(ctx, &xorCipher{}, env, []byte("x"))
	require.EqualError(t, err, "acemq: the body does not open: no key k2")
}

// TestCipherHeaderOfTheWrongType: a delivery whose CipherHeader is not a
// string is unreadable, and parked with the reason, never opened.
func TestCipherHeaderOfTheWrongType(t *testing.T) {
	ctx := t.Context()
	got, onSettled := newSettlements()
	c := connect(t, acemq.WithBodyCipher(&xorCipher{}), onSettled)
	q := declareQueue(t, c)
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[string]) acemq.Ack { return acemq.Done() })
	require.NoError(t, err)
	require.NoError(t, c.Transport().Publish(ctx, transport.Message{RoutingKey: q, MessageID: "m1", Body: []byte(`"x"`),
		Headers: map[string]any{acemq.CipherHeader: int32(7)}}))
	run(t, cons)
	s := got.next(t)
	require.Equal(t, acemq.OutcomeParked, s.Outcome)
	require.Contains(t, s.Reason, "header x-acemq-cipher-key is a int32, want a string")
}

// panicCipher panics, as a per-subject function with a bug would.
type panicCipher struct{}

func (*panicCipher) Seal(context.Context, *acemq.Envelope, []byte, []byte) (string, []byte, error) {
	panic("no tenant")
}

func (*panicCipher) Open(context.Context, *acemq.Envelope, string, []byte, []byte) ([]byte, error) {
	panic("no tenant")
}

// badKeyCipher names a key no header can carry.
type badKeyCipher struct{ xorCipher }

func (*badKeyCipher) Seal(_ context.Context, _ *acemq.Envelope, body, _ []byte) (string, []byte, error) {
	return "k\xff", body, nil
}

// TestCipherFailuresAreErrors: a cipher that panics fails the Send (and
// parks the delivery) instead of ending the process; one that names a key
// no header can carry fails the Send.
func TestCipherFailuresAreErrors(t *testing.T) {
	ctx := t.Context()
	got, onSettled := newSettlements()
	c := connect(t, acemq.WithBodyCipher(&panicCipher{}), onSettled)
	q := declareQueue(t, c)
	err := acemq.NewPublisher[string](c, "", q).Send(ctx, "x")
	require.ErrorContains(t, err, "acemq: sealing the body of")
	require.ErrorContains(t, err, "the cipher panicked: no tenant")

	require.NoError(t, c.Transport().Publish(ctx, transport.Message{RoutingKey: q, MessageID: "m1", Body: []byte(`"x"`),
		Headers: map[string]any{acemq.CipherHeader: "k1"}}))
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[string]) acemq.Ack { return acemq.Done() })
	require.NoError(t, err)
	run(t, cons)
	s := got.next(t)
	require.Equal(t, acemq.OutcomeParked, s.Outcome)
	require.Contains(t, s.Reason, "the body does not open: the cipher panicked: no tenant")

	bad := connect(t, acemq.WithBodyCipher(&badKeyCipher{}))
	require.NoError(t, bad.Declare(ctx, acemq.Queue{Name: q}))
	require.ErrorContains(t, acemq.NewPublisher[string](bad, "", q).Send(ctx, "x"), "want 1 to 255 bytes of UTF-8")
}

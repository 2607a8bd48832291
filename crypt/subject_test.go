package crypt_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/crypt"
	"github.com/stretchr/testify/require"
)

// tenantOf is the subject function of the tests: the tenant header.
func tenantOf(env *acemq.Envelope) string {
	s, _ := env.Headers["tenant"].(string)
	return s
}

// TestShreddedSubject: once a subject's keyset is deleted, its messages,
// wherever they wait, park with a reason naming its key, and every other
// subject's are handled.
func TestShreddedSubject(t *testing.T) {
	eachBroker(t, func(t *testing.T, url string) {
		ctx := t.Context()
		keys := &crypt.MemorySubjectKeys{}
		cipher, err := crypt.PerSubject(keys, tenantOf)
		require.NoError(t, err)
		got, onSettled := newSettlements()
		c := connect(t, url, acemq.WithBodyCipher(cipher), onSettled)
		q := consumerQueue(t, url, "crypt-shred")
		var mu sync.Mutex
		handled := map[string]int{}
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[order]) acemq.Ack {
			mu.Lock()
			handled[m.Payload.Tenant]++
			mu.Unlock()
			return acemq.Done()
		}, acemq.Concurrency(2))
		require.NoError(t, err)
		pub := acemq.NewPublisher[order](c, "", q)
		tenants := []string{"t-alpha", "t-bravo", "t-charlie"}
		const each = 10
		for i := range each {
			for _, tn := range tenants {
				require.NoError(t, pub.Send(ctx, order{Tenant: tn, Card: marker, N: i}, acemq.Header("tenant", tn)))
			}
		}
		keys.Delete("t-bravo") // the subject asked to be forgotten
		run(t, cons)
		parked := 0
		for range each * len(tenants) {
			s := got.next(t)
			switch s.Outcome {
			case acemq.OutcomeAcked:
			case acemq.OutcomeParked:
				parked++
				require.Contains(t, s.Reason, `crypt: unknown key: subject "t-bravo" has no keyset`)
			default:
				t.Fatalf("outcome %s: %s", s.Outcome, s.Reason)
			}
		}
		require.Equal(t, each, parked)
		mu.Lock()
		require.Equal(t, map[string]int{"t-alpha": each, "t-charlie": each}, handled)
		mu.Unlock()
		for range each {
			d := get(t, c, acemq.ParkingQueue(q))
			require.NotContains(t, string(d.Body), marker)
			env, err := acemq.EnvelopeOf(d.Message)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(env.Reserved()[acemq.CipherHeader].(string), "t-bravo/"))
		}
	})
}

// TestPerSubjectRefusesNoSubject: a message whose subject function gives
// nothing, or a name with '/', fails its Send; nothing is sent in the
// clear.
func TestPerSubjectRefusesNoSubject(t *testing.T) {
	url := brokers[0].url(t)
	cipher, err := crypt.PerSubject(&crypt.MemorySubjectKeys{}, tenantOf)
	require.NoError(t, err)
	c := connect(t, url, acemq.WithBodyCipher(cipher))
	q := consumerQueue(t, url, "crypt-nosubject")
	require.NoError(t, c.Declare(t.Context(), acemq.Queue{Name: q}))
	pub := acemq.NewPublisher[order](c, "", q)
	err = pub.Send(t.Context(), order{})
	require.ErrorContains(t, err, `acemq: sealing the body of`)
	require.ErrorContains(t, err, `the subject of the message is ""`)
	require.ErrorContains(t, pub.Send(t.Context(), order{}, acemq.Header("tenant", "a/b")), `without '/'`)
	info, err := c.Transport().Inspect(t.Context(), q)
	require.NoError(t, err)
	require.Zero(t, info.Messages)
}

// TestSubjectKeysetOpensWithKeys: a subject's keyset, given to Keys (as
// acemq peek -keyset does), opens what PerSubject sealed for it.
func TestSubjectKeysetOpensWithKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	keys := &crypt.MemorySubjectKeys{}
	cipher, err := crypt.PerSubject(keys, tenantOf)
	require.NoError(t, err)
	env := &acemq.Envelope{ID: "m", Type: "T", Headers: map[string]any{"tenant": "t-1"}}
	keyID, sealed, err := cipher.Seal(ctx, env, []byte(marker), []byte("ad"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(keyID, "t-1/"), keyID)
	h, err := keys.Keyset(ctx, "t-1", false)
	require.NoError(t, err)
	k, err := crypt.New(h)
	require.NoError(t, err)
	body, err := k.Open(ctx, env, keyID, sealed, []byte("ad"))
	require.NoError(t, err)
	require.Equal(t, marker, string(body))
	_, err = cipher.Open(ctx, env, "t-1/x", sealed, []byte("ad"))
	require.ErrorIs(t, err, crypt.ErrUnknownKey)
	_, err = cipher.Open(ctx, env, "nosubject", sealed, []byte("ad"))
	require.ErrorIs(t, err, crypt.ErrUnknownKey)
}

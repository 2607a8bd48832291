package crypt_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/require"
)

// TestDelayedBodyStaysSealed: a message sent with acemq.After waits in the
// delay topology and arrives sealed, its key ID and due time kept, and a
// consumer opens it: the forwarder moves the ciphertext as it is, and the
// envelope it is bound to is the one it was sealed with.
func TestDelayedBodyStaysSealed(t *testing.T) {
	eachBroker(t, func(t *testing.T, url string) {
		ctx := t.Context()
		k, _ := newKeys(t)
		c := connect(t, url, acemq.WithBodyCipher(k))
		q := consumerQueue(t, url, "crypt-delay")
		pub := acemq.NewPublisher[order](c, "", q)
		got := make(chan order, 1)
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[order]) acemq.Ack {
			got <- m.Payload
			return acemq.Done()
		}) // declares q; run only after the raw read
		require.NoError(t, err)

		// Arrived, read raw: still ciphertext, and it opens.
		sent := time.Now()
		require.NoError(t, pub.Send(ctx, order{Card: marker, N: 1}, acemq.After(300*time.Millisecond)))
		d := get(t, c, q)
		require.NotContains(t, string(d.Body), marker, "plaintext after the delay topology")
		env, err := acemq.EnvelopeOf(d.Message)
		require.NoError(t, err)
		require.Equal(t, strconv.FormatUint(uint64(k.Primary()), 10), env.Reserved()[acemq.CipherHeader])
		require.False(t, env.Due.Before(sent.Add(300*time.Millisecond).Truncate(time.Millisecond)), "due %v", env.Due)
		opened, err := acemq.OpenBody(ctx, k, env, d.Body)
		require.NoError(t, err)
		require.Contains(t, string(opened), marker)

		// Through a consumer: opened and decoded.
		run(t, cons)
		require.NoError(t, pub.Send(ctx, order{Card: marker, N: 2}, acemq.After(300*time.Millisecond)))
		select {
		case o := <-got:
			require.Equal(t, order{Card: marker, N: 2}, o)
		case <-time.After(20 * time.Second):
			t.Fatal("the delayed sealed message was not handled within 20s")
		}
	})
}

package crypt_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/crypt"
	"github.com/stretchr/testify/require"
)

// TestNoPlaintextInQueueOrDLQ: a raw reader of the queue and of its .dlq
// finds the key ID in the header and no plaintext in the body; the keyset
// opens what it reads.
func TestNoPlaintextInQueueOrDLQ(t *testing.T) {
	eachBroker(t, func(t *testing.T, url string) {
		ctx := t.Context()
		k, _ := newKeys(t)
		got, onSettled := newSettlements()
		c := connect(t, url, acemq.WithBodyCipher(k), onSettled)
		q := consumerQueue(t, url, "crypt-wire")
		cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[order]) acemq.Ack {
			return acemq.Reject(fmt.Errorf("refused on purpose"))
		})
		require.NoError(t, err)
		pub := acemq.NewPublisher[order](c, "", q)

		check := func(where string, m acemq.Envelope, body []byte) {
			t.Helper()
			require.NotContains(t, string(body), marker, "plaintext in %s", where)
			keyID, ok := m.Reserved()[acemq.CipherHeader].(string)
			require.True(t, ok, "no %s on the message in %s", acemq.CipherHeader, where)
			require.Equal(t, strconv.FormatUint(uint64(k.Primary()), 10), keyID)
			opened, err := acemq.OpenBody(ctx, k, &m, body)
			require.NoError(t, err)
			require.Contains(t, string(opened), marker)
		}

		// The queue itself, before any consumer reads it.
		require.NoError(t, pub.Send(ctx, order{Card: marker, N: 1}))
		d := get(t, c, q)
		env, err := acemq.EnvelopeOf(d.Message)
		require.NoError(t, err)
		check(q, *env, d.Body)
		require.Equal(t, "application/json", d.ContentType, "the content type stays the codec's")

		// .dlq, after the consumer opened, decoded and rejected them.
		const n = 5
		for i := range n {
			require.NoError(t, pub.Send(ctx, order{Card: marker, N: i}))
		}
		run(t, cons)
		for range n {
			s := got.next(t)
			require.Equal(t, acemq.OutcomeRejected, s.Outcome, s.Reason)
		}
		for range n {
			d := get(t, c, acemq.DeadLetterQueue(q))
			env, err := acemq.EnvelopeOf(d.Message)
			require.NoError(t, err)
			require.Contains(t, env.Error, "refused on purpose")
			check(acemq.DeadLetterQueue(q), *env, d.Body)
		}
	})
}

// TestRotationInFlight: a consumer given a keyset with the next key added
// handles what the publisher seals before and after it promotes that key;
// once the old key is removed, what it sealed parks with a reason naming
// it.
func TestRotationInFlight(t *testing.T) {
	eachBroker(t, func(t *testing.T, url string) {
		ctx := t.Context()
		sender, h1 := newKeys(t)
		old := sender.Primary()
		h2, next, err := crypt.Rotate(h1, false) // step 1: every reader gets the key
		require.NoError(t, err)
		reader, err := crypt.New(h2)
		require.NoError(t, err)
		require.Equal(t, old, reader.Primary(), "not promoted yet")

		got, onSettled := newSettlements()
		pc := connect(t, url, acemq.WithBodyCipher(sender))
		cc := connect(t, url, acemq.WithBodyCipher(reader), onSettled)
		q := consumerQueue(t, url, "crypt-rotate")
		var mu sync.Mutex
		seen := map[int]bool{}
		cons, err := acemq.NewConsumer(cc, q, func(_ context.Context, m *acemq.Message[order]) acemq.Ack {
			mu.Lock()
			seen[m.Payload.N] = true
			mu.Unlock()
			return acemq.Done()
		}, acemq.Concurrency(4))
		require.NoError(t, err)
		run(t, cons)
		pub := acemq.NewPublisher[order](pc, "", q)

		// Sends go on while the sender promotes the new key (step 2).
		const n = 200
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range n {
				if i == n/2 {
					h3, err := crypt.Promote(h2, next)
					if err != nil {
						t.Error(err)
						return
					}
					if err := sender.Replace(h3); err != nil {
						t.Error(err)
						return
					}
				}
				if err := pub.Send(ctx, order{Card: marker, N: i}); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Wait()
		require.Equal(t, next, sender.Primary())
		for range n {
			s := got.next(t)
			require.Equal(t, acemq.OutcomeAcked, s.Outcome, s.Reason)
		}
		mu.Lock()
		require.Len(t, seen, n)
		mu.Unlock()

		// Step 3: the old key removed from the reader; a message still
		// sealed with it (one sent by a sender not yet rotated) parks.
		stale, err := crypt.New(h1)
		require.NoError(t, err)
		h4, err := crypt.Remove(mustPromote(t, h2, next), old)
		require.NoError(t, err)
		require.NoError(t, reader.Replace(h4))
		stalePub := acemq.NewPublisher[order](connect(t, url, acemq.WithBodyCipher(stale)), "", q)
		require.NoError(t, stalePub.Send(ctx, order{Card: marker}))
		s := got.next(t)
		require.Equal(t, acemq.OutcomeParked, s.Outcome)
		require.Contains(t, s.Reason, "crypt: unknown key "+strconv.FormatUint(uint64(old), 10))
		d := get(t, cc, acemq.ParkingQueue(q))
		require.NotContains(t, string(d.Body), marker, "plaintext in .parked")
	})
}

// TestParkedWithReason: a body changed in transit, a body moved onto
// another envelope, a key the keyset never held and a body in the clear
// are each parked, never acked, with a reason that says which.
func TestParkedWithReason(t *testing.T) {
	eachBroker(t, func(t *testing.T, url string) {
		ctx := t.Context()
		k, _ := newKeys(t)
		other, _ := newKeys(t)
		got, onSettled := newSettlements()
		c := connect(t, url, acemq.WithBodyCipher(k), onSettled)
		plainConn := connect(t, url)
		otherConn := connect(t, url, acemq.WithBodyCipher(other))
		q := consumerQueue(t, url, "crypt-park")
		handled := make(chan int, 16)
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[order]) acemq.Ack {
			handled <- m.Payload.N
			return acemq.Done()
		})
		require.NoError(t, err)
		pub := acemq.NewPublisher[order](c, "", q)

		// Tampered: one bit of the ciphertext flipped.
		m, err := pub.Prepare(ctx, order{Card: marker, N: 1})
		require.NoError(t, err)
		m.Body[len(m.Body)-1] ^= 1
		require.NoError(t, c.PublishRaw(ctx, m))
		// Moved: the body of one message under the envelope of another.
		a, err := pub.Prepare(ctx, order{Card: marker, N: 2})
		require.NoError(t, err)
		b, err := pub.Prepare(ctx, order{Card: marker, N: 3})
		require.NoError(t, err)
		a.Body = b.Body
		require.NoError(t, c.PublishRaw(ctx, a))
		// Sealed under a keyset this Conn has never held.
		require.NoError(t, acemq.NewPublisher[order](otherConn, "", q).Send(ctx, order{Card: marker, N: 4}))
		// In the clear, from a Conn without the cipher.
		require.NoError(t, acemq.NewPublisher[order](plainConn, "", q).Send(ctx, order{N: 5}))
		// And one that is fine.
		require.NoError(t, pub.Send(ctx, order{Card: marker, N: 6}))

		run(t, cons)
		want := []string{
			"crypt: the body failed authentication",
			"crypt: the body failed authentication",
			"crypt: unknown key " + strconv.FormatUint(uint64(other.Primary()), 10),
			"crypt: the body is not sealed",
		}
		var reasons []string
		for range 5 {
			s := got.next(t)
			if s.Outcome == acemq.OutcomeAcked {
				continue
			}
			require.Equal(t, acemq.OutcomeParked, s.Outcome, s.Reason)
			require.True(t, strings.HasPrefix(s.Reason, "the body does not open: "), s.Reason)
			reasons = append(reasons, s.Reason)
		}
		require.Len(t, reasons, len(want))
		for i, w := range want {
			require.Contains(t, reasons[i], w)
		}
		require.Equal(t, 6, <-handled, "only the sound message reached the handler")
		for range 4 {
			d := get(t, c, acemq.ParkingQueue(q))
			require.NotContains(t, string(d.Body), marker, "plaintext in .parked")
		}
	})
}

// TestAllowPlain: with AllowPlain, a body in the clear is handled (a
// migration), and sends are sealed all the same.
func TestAllowPlain(t *testing.T) {
	ctx := t.Context()
	url := brokers[0].url(t)
	k, _ := newKeys(t, crypt.AllowPlain())
	got, onSettled := newSettlements()
	c := connect(t, url, acemq.WithBodyCipher(k), onSettled)
	q := consumerQueue(t, url, "crypt-plain")
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[order]) acemq.Ack { return acemq.Done() })
	require.NoError(t, err)
	require.NoError(t, acemq.NewPublisher[order](connect(t, url), "", q).Send(ctx, order{N: 1}))
	m, err := acemq.NewPublisher[order](c, "", q).Prepare(ctx, order{Card: marker})
	require.NoError(t, err)
	require.NotContains(t, string(m.Body), marker)
	run(t, cons)
	require.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
}

func mustPromote(t *testing.T, h *keysetHandle, id uint32) *keysetHandle {
	t.Helper()
	out, err := crypt.Promote(h, id)
	require.NoError(t, err)
	return out
}

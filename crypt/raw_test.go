package crypt_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/blob"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// rawBodies reads every message of queue with amqp091-go itself, as any
// AMQP client would, and puts them back.
func rawBodies(t *testing.T, url, queue string) []amqp.Delivery {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	var got []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, false)
		require.NoError(t, err)
		if !ok {
			break
		}
		got = append(got, d)
	}
	require.NoError(t, ch.Close()) // unacked: back on the queue
	return got
}

// TestRawAMQPReaderFindsNoPlaintext: a plain amqp091-go client reading
// the queue, its .dlq and its .parked on RabbitMQ sees the key ID in the
// header and no plaintext in any body.
func TestRawAMQPReaderFindsNoPlaintext(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	ctx := t.Context()
	k, _ := newKeys(t)
	got, onSettled := newSettlements()
	c := connect(t, url, acemq.WithBodyCipher(k), onSettled)
	q := consumerQueue(t, url, "crypt-raw")
	var n atomic.Int32
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[order]) acemq.Ack {
		if n.Add(1) == 1 {
			return acemq.Reject(nil) // to .dlq
		}
		return acemq.Park(nil) // to .parked
	})
	require.NoError(t, err)
	pub := acemq.NewPublisher[order](c, "", q)
	for i := range 3 {
		require.NoError(t, pub.Send(ctx, order{Card: marker, N: i}))
	}
	ds := rawBodies(t, url, q)
	require.Len(t, ds, 3)
	for _, d := range ds {
		require.NotContains(t, string(d.Body), marker)
		require.Contains(t, d.Headers, acemq.CipherHeader)
	}
	run(t, cons)
	for range 3 {
		got.next(t)
	}
	for _, queue := range []string{acemq.DeadLetterQueue(q), acemq.ParkingQueue(q)} {
		require.Eventually(t, func() bool { return len(rawBodies(t, url, queue)) > 0 }, 10*time.Second, 20*time.Millisecond)
		for _, d := range rawBodies(t, url, queue) {
			require.NotContains(t, string(d.Body), marker, queue)
			require.Contains(t, d.Headers, acemq.CipherHeader, queue)
		}
	}
}

// TestRetriedBodyStaysOpenable: the copy a retry puts on its tier is the
// sealed body with its key header, and it opens on the next attempt.
func TestRetriedBodyStaysOpenable(t *testing.T) {
	eachBroker(t, func(t *testing.T, url string) {
		ctx := t.Context()
		k, _ := newKeys(t)
		got, onSettled := newSettlements()
		c := connect(t, url, acemq.WithBodyCipher(k), onSettled)
		q := consumerQueue(t, url, "crypt-retry")
		delay := 20 * time.Millisecond
		acemqtest.DeleteQueuesAfter(t, url, acemq.RetryQueue(q, delay))
		var n atomic.Int32
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[order]) acemq.Ack {
			if m.Payload.Card != marker {
				return acemq.Reject(nil)
			}
			if n.Add(1) == 1 {
				return acemq.Retry(nil)
			}
			return acemq.Done()
		}, acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{delay}}))
		require.NoError(t, err)
		run(t, cons)
		require.NoError(t, acemq.NewPublisher[order](c, "", q).Send(ctx, order{Card: marker}))
		require.Equal(t, acemq.OutcomeRetried, got.next(t).Outcome)
		s := got.next(t)
		require.Equal(t, acemq.OutcomeAcked, s.Outcome, s.Reason)
		require.Equal(t, 2, s.Attempt)
	})
}

// TestClaimCheckedObjectIsSealed: with a cipher and blob.WithClaimCheck,
// the object stored for a large body is the sealed body.
func TestClaimCheckedObjectIsSealed(t *testing.T) {
	eachBroker(t, func(t *testing.T, url string) {
		ctx := t.Context()
		k, _ := newKeys(t)
		store := blob.Memory()
		got, onSettled := newSettlements()
		c := connect(t, url, acemq.WithBodyCipher(k), blob.WithClaimCheck(store, 1024), onSettled)
		q := consumerQueue(t, url, "crypt-claim")
		seen := make(chan string, 1)
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[order]) acemq.Ack {
			seen <- m.Payload.Card
			return acemq.Done()
		})
		require.NoError(t, err)
		big := strings.Repeat(marker, 200)
		m, err := acemq.NewPublisher[order](c, "", q).Prepare(ctx, order{Card: big})
		require.NoError(t, err)
		require.Equal(t, acemq.ClaimCheckContentType, m.ContentType)
		var ref blob.Ref
		require.NoError(t, jsonUnmarshal(m.Body, &ref))
		stored := readAll(t, store, ref.ID)
		require.NotContains(t, string(stored), marker, "plaintext in the claim-checked object")
		require.NoError(t, c.PublishRaw(ctx, m))
		run(t, cons)
		require.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
		require.Equal(t, big, <-seen)
	})
}

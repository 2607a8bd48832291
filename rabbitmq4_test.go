package acemq_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
)

// TestQuorumDeliveryLimitDeadLetters: a quorum queue counts the times it
// handed a message out without an ack, and RabbitMQ 4 drops a message past
// its delivery limit (20 by default) unless the queue dead-letters. A
// message given back again and again (as by consumers that die holding
// it) goes past the limit acemq sets, MaxAttempts + 20, and ends in .dlq,
// from a plain consumer's queue and from an ordered one's partition.
func TestQuorumDeliveryLimitDeadLetters(t *testing.T) {
	t.Parallel()
	url := acemqtest.RabbitMQ(t)
	for _, ordered := range []bool{false, true} {
		name := "plain"
		if ordered {
			name = "ordered"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			policy := acemq.RetryPolicy{MaxAttempts: 2}
			c := connectURL(t, url, acemq.WithRetryPolicy(policy))
			opts := []acemq.ConsumerOption{acemq.Quorum()}
			var q, work string
			if ordered {
				q = orderedQueue(t, url, 1)
				work = acemq.PartitionQueue(q, 0)
				opts = append(opts, acemq.Ordered(acemq.OrderPolicy{Partitions: 1}))
			} else {
				q = consumerQueue(t, url, policy)
				work = q
				acemqtest.DeleteQueuesAfter(t, url, acemq.DeadLetterQueue(q), acemq.ParkingQueue(q))
			}
			// Declared, not run: the test plays the consumers.
			_, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() }, opts...)
			require.NoError(t, err)
			tr := c.Transport()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			require.NoError(t, tr.Publish(ctx, transport.Message{RoutingKey: work, MessageID: "poison", Body: []byte(`{"key":"k","n":1}`)}))

			// Each delivery is on a channel of its own, closed without an ack:
			// the broker counts that as a failed delivery on every version
			// (RabbitMQ 4 no longer counts a nack with requeue).
			raw := rawConn(t, url)
			dlq := acemq.DeadLetterQueue(q)
			handed := 0
			within(t, time.Minute, "the message in "+dlq, func() bool {
				ch, err := raw.Channel()
				require.NoError(t, err)
				require.NoError(t, ch.Qos(1, 0, false))
				// Consumed, not got: a single-active-consumer quorum
				// queue refuses basic.get.
				ds, err := ch.Consume(work, "", false, false, false, false, nil)
				require.NoError(t, err)
				select {
				case <-ds:
					handed++
				case <-time.After(200 * time.Millisecond):
				}
				_ = ch.Close()
				info, err := tr.Inspect(ctx, dlq)
				return err == nil && info.Messages == 1
			})
			limit := policy.MaxAttempts + 20
			require.Greater(t, handed, limit, "dead-lettered before the limit acemq set")
			t.Logf("handed out %d times before the broker dead-lettered it (x-delivery-limit %d)", handed, limit)
			d, ok, err := tr.Get(ctx, dlq)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, "poison", d.MessageID)
			require.NoError(t, d.Ack())
			info, err := tr.Inspect(ctx, work)
			require.NoError(t, err)
			require.Zero(t, info.Messages, "left in %s", work)
		})
	}
}

// rawConn is an amqp091-go connection to url of its own, closed when t ends.
func rawConn(t *testing.T, url string) *amqp.Connection {
	t.Helper()
	c, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

package acemq_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/require"
)

// TestPublishRawAll: every message is confirmed or fails alone, messages
// of one key arrive in the slice's order, an unrenderable one fails
// without holding back the rest, and a closed Conn refuses them all.
func TestPublishRawAll(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := consumerQueue(t, url, acemq.RetryPolicy{})
		c := connectURL(t, url)
		const n = 200
		got := make(chan string, n)
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			got <- m.Payload.OrderID
			return acemq.Done()
		}, acemq.Concurrency(1))
		require.NoError(t, err)
		run(t, cons)
		msgs := make([]acemq.RawMessage, n)
		for i := range msgs {
			msgs[i] = acemq.RawMessage{RoutingKey: q, ContentType: "application/json",
				Envelope: &acemq.Envelope{ID: fmt.Sprintf("m-%03d", i), Type: "OrderPlaced", Version: 1, Attempt: 1, Key: "k"},
				Body:     fmt.Appendf(nil, `{"orderId":"%03d"}`, i)}
		}
		msgs[7].Envelope = nil
		errs := c.PublishRawAll(ctxT(t), msgs)
		require.Len(t, errs, n)
		require.ErrorContains(t, errs[7], "acemq: PublishRawAll was given a message without an envelope (message 7 of 200)")
		for i, err := range errs {
			if i != 7 {
				require.NoError(t, err, "message %d", i)
			}
		}
		for i := range n {
			if i == 7 {
				continue
			}
			require.Equal(t, fmt.Sprintf("%03d", i), <-got, "in the slice's order")
		}

		require.NoError(t, c.Close())
		for _, err := range c.PublishRawAll(ctxT(t), msgs[:2]) {
			require.ErrorIs(t, err, acemq.ErrClosed)
		}
	})
}

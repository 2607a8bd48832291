package acemq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
)

// TestMovesKeepTimestampAndAppID: a message an earlier build wrote (wire
// format v1) drains through today's consumer; its retry and its dead
// letter go out in v2 with the attempt and the error as headers, while ID,
// timestamp and app-id stay what the first publish made them.
func TestMovesKeepTimestampAndAppID(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		got, hook := newSettlements()
		c := connectURL(t, url, hook, acemq.WithRetryPolicy(fastRetry), acemq.WithOrigin("today@host2"))
		q := consumerQueue(t, url, fastRetry)
		seen := time.Date(2026, 11, 29, 12, 30, 45, 123456789, time.UTC)
		type attempt struct {
			n         int
			firstSeen time.Time
			origin    string
		}
		attempts := make(chan attempt, 4)
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			attempts <- attempt{m.Envelope.Attempt, m.Envelope.FirstSeen, m.Envelope.Origin}
			if m.Envelope.Attempt == 1 {
				return acemq.Retry(errors.New("not yet"))
			}
			return acemq.Reject(errors.New("no"))
		})
		require.NoError(t, err)
		run(t, cons)
		require.NoError(t, c.Transport().Publish(ctxT(t), transport.Message{
			RoutingKey: q, ContentType: "application/json", Body: []byte(`{"orderId":"7"}`),
			MessageID: "order-7", Type: "OrderPlaced", AppID: "billing@host1", Timestamp: seen.Truncate(time.Second),
			Headers: map[string]any{
				"x-acemq-id": "order-7", "x-acemq-type": "OrderPlaced", "x-acemq-version": int32(1),
				"x-acemq-attempt": int32(1), "x-acemq-first-seen": seen.Format(time.RFC3339Nano),
				"x-acemq-origin": "billing@host1",
			},
		}))
		assert.Equal(t, acemq.OutcomeRetried, got.next(t).Outcome)
		assert.Equal(t, acemq.OutcomeRejected, got.next(t).Outcome)
		first, second := <-attempts, <-attempts
		assert.Equal(t, attempt{1, seen, "billing@host1"}, first, "the v1 headers are read")
		assert.Equal(t, attempt{2, seen.Truncate(time.Second), "billing@host1"}, second, "the retry kept timestamp and app-id")

		dl := take(t, c, acemq.DeadLetterQueue(q))
		assert.Equal(t, "order-7", dl.MessageID)
		assert.Equal(t, "billing@host1", dl.AppID)
		assert.Equal(t, seen.Unix(), dl.Timestamp.Unix())
		assert.Equal(t, "OrderPlaced", dl.Type)
		assert.Equal(t, map[string]any{"x-acemq-attempt": int32(2), "x-acemq-error": "the handler rejected it: no"}, withoutDeath(dl.Headers))
	})
}

// withoutDeath drops the x-death and x-first-death/x-last-death headers
// RabbitMQ adds when a retry tier dead-letters a message back.
func withoutDeath(h map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range h {
		switch k {
		case "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
			"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason":
			continue
		}
		out[k] = v
	}
	return out
}

// TestMovesDropTheBrokersHeaders: a message retried through two tiers and
// then dead-lettered reads the broker's x-death bookkeeping on each
// delivery, but no move republishes it: the second delivery's x-death
// names the first tier alone, the third's the second tier alone, and the
// dead letter carries none of it.
func TestMovesDropTheBrokersHeaders(t *testing.T) {
	t.Parallel()
	url := acemqtest.RabbitMQ(t)
	got, hook := newSettlements()
	c := connectURL(t, url, hook, acemq.WithRetryPolicy(fastRetry))
	q := consumerQueue(t, url, fastRetry)
	type seen struct {
		attempt    int
		firstDeath any // x-first-death-queue
		deaths     int // entries of x-death
	}
	seenCh := make(chan seen, 4)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		deaths, _ := m.Envelope.Headers["x-death"].([]any)
		seenCh <- seen{m.Envelope.Attempt, m.Envelope.Headers["x-first-death-queue"], len(deaths)}
		if m.Envelope.Attempt < 3 {
			return acemq.Retry(errors.New("not yet"))
		}
		return acemq.Reject(errors.New("no"))
	})
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "9"}))
	assert.Equal(t, acemq.OutcomeRetried, got.next(t).Outcome)
	assert.Equal(t, acemq.OutcomeRetried, got.next(t).Outcome)
	assert.Equal(t, acemq.OutcomeRejected, got.next(t).Outcome)
	tier1, tier2 := acemq.RetryQueue(q, fastRetry.Delays[0]), acemq.RetryQueue(q, fastRetry.Delays[1])
	assert.Equal(t, seen{1, nil, 0}, <-seenCh, "the first delivery")
	assert.Equal(t, seen{2, tier1, 1}, <-seenCh, "the second delivery reads the broker's headers")
	assert.Equal(t, seen{3, tier2, 1}, <-seenCh, "the third: the retry to the second tier did not carry the first tier's")

	dl := take(t, c, acemq.DeadLetterQueue(q))
	for k := range dl.Headers {
		switch {
		case k == "x-death", k == "x-delivery-count", strings.HasPrefix(k, "x-first-death-"), strings.HasPrefix(k, "x-last-death-"):
			t.Errorf("the dead letter carries the broker's header %s = %v", k, dl.Headers[k])
		}
	}
	assert.Equal(t, "the handler rejected it: no", dl.Headers["x-acemq-error"])
}

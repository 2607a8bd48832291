package acemq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQuorumEverywhere: with Quorum() or WithQuorumQueues() every queue of
// the ladder is a quorum queue, the tiers dead-letter back at least once,
// and a retried message climbs the ladder through them.
func TestQuorumEverywhere(t *testing.T) {
	t.Parallel()
	policy := acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{50 * time.Millisecond}}
	for _, tc := range []struct {
		name string
		conn []acemq.ConnOption
		cons []acemq.ConsumerOption
	}{
		{"Quorum", nil, []acemq.ConsumerOption{acemq.Quorum()}},
		{"WithQuorumQueues", []acemq.ConnOption{acemq.WithQuorumQueues()}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			onBrokers(t, func(t *testing.T, url string) {
				got, opt := newSettlements()
				c := connectURL(t, url, append(tc.conn, opt, acemq.WithRetryPolicy(policy))...)
				q := consumerQueue(t, url, policy)
				calls := 0
				cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
					calls++
					if calls == 1 {
						return acemq.Retry(errors.New("not yet"))
					}
					return acemq.Done()
				}, tc.cons...)
				require.NoError(t, err)

				// Each queue is a quorum queue: declaring it classic conflicts.
				tier := acemq.RetryQueue(q, 50*time.Millisecond)
				for _, name := range []string{q, acemq.DeadLetterQueue(q), acemq.ParkingQueue(q), tier} {
					err := c.Transport().Declare(ctxT(t), transport.Queue{Name: name})
					assert.ErrorIs(t, err, transport.ErrTopologyConflict, "%s is not a quorum queue", name)
				}
				// The tier as the engine declares it: equivalent, so accepted.
				require.NoError(t, c.Transport().Declare(ctxT(t), transport.Queue{Name: tier, Quorum: true, Args: map[string]any{
					"x-message-ttl":             int64(50),
					"x-dead-letter-exchange":    "",
					"x-dead-letter-routing-key": q,
					"x-dead-letter-strategy":    "at-least-once",
					"x-overflow":                "reject-publish",
				}}), "the tier dead-letters at least once")

				run(t, cons)
				require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "Q-1"}))
				assert.Equal(t, acemq.OutcomeRetried, got.next(t).Outcome)
				s := got.next(t)
				assert.Equal(t, acemq.OutcomeAcked, s.Outcome, "the message came back from the quorum tier")
				assert.Equal(t, 2, s.Attempt)
			})
		})
	}
}

// TestQuorumOverAClassicQueue: Quorum() on a queue that exists as a
// classic queue fails NewConsumer saying that, and how to migrate, rather
// than naming whichever argument the broker compared first.
func TestQuorumOverAClassicQueue(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := consumerQueue(t, url, acemq.DefaultRetryPolicy())
		_, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
		require.NoError(t, err, "the classic ladder")
		_, err = acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() }, acemq.Quorum())
		require.Error(t, err)
		t.Logf("%v", err)
		assert.ErrorIs(t, err, transport.ErrTopologyConflict)
		assert.Contains(t, err.Error(), `queue "`+q+`" exists as a classic queue`)
		assert.Contains(t, err.Error(), "cannot change in place")
		assert.NotContains(t, err.Error(), "x-dead-letter-exchange")
		assert.Equal(t, 1, strings.Count(err.Error(), "acemq:"), "one prefix: %v", err)
	})
}

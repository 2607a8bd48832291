package acemq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/require"
)

// With RetryPolicy.ThroughDelay, retries wait in the delay topology: no
// tier queue is declared, each retry waits at least its delay (RetryAfter's
// as asked, not rounded to a tier), the attempt count holds, and the last
// failure goes to .dlq with its reason.
func TestRetriesThroughTheDelayTopology(t *testing.T) {
	t.Parallel()
	policy := acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{300 * time.Millisecond}, ThroughDelay: true}
	onBrokers(t, func(t *testing.T, url string) {
		got, opt := newSettlements()
		c := connectURL(t, url, opt)
		q := consumerQueue(t, url, acemq.RetryPolicy{})
		type seen struct {
			attempt int
			at      time.Time
		}
		arrivals := make(chan seen, 8)
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			arrivals <- seen{m.Envelope.Attempt, time.Now()}
			if m.Envelope.Attempt == 2 {
				return acemq.RetryAfter(450*time.Millisecond, errors.New("later, please"))
			}
			return acemq.Retry(errors.New("still failing"))
		}, acemq.WithConsumerRetry(policy))
		require.NoError(t, err)
		_, err = c.Transport().Inspect(ctxT(t), acemq.RetryQueue(q, 300*time.Millisecond))
		require.ErrorIs(t, err, acemq.ErrNotFound, "a tier queue was declared")
		run(t, cons)
		require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "r"}))

		var prev seen
		waits := []time.Duration{0, 300 * time.Millisecond, 450 * time.Millisecond}
		for i, wait := range waits {
			var s seen
			select {
			case s = <-arrivals:
			case <-time.After(30 * time.Second):
				t.Fatalf("attempt %d did not arrive", i+1)
			}
			require.Equal(t, i+1, s.attempt)
			if i > 0 {
				require.GreaterOrEqual(t, s.at.Sub(prev.at), wait, "attempt %d came early", i+1)
			}
			prev = s
		}
		outcomes := []acemq.Outcome{}
		for range 3 {
			s := got.next(t)
			outcomes = append(outcomes, s.Outcome)
			if s.Outcome == acemq.OutcomeDeadLettered {
				require.True(t, strings.HasPrefix(s.Reason, "gave up after 3 attempts: still failing"), s.Reason)
			}
		}
		require.Equal(t, []acemq.Outcome{acemq.OutcomeRetried, acemq.OutcomeRetried, acemq.OutcomeDeadLettered}, outcomes)
		d := take(t, c, acemq.DeadLetterQueue(q))
		env, err := acemq.EnvelopeOf(d.Message)
		require.NoError(t, err)
		require.Equal(t, 3, env.Attempt)
		require.Contains(t, env.Error, "gave up after 3 attempts")
	})
}

func TestRetryThroughDelayRefusesDelaysPastMaxDelay(t *testing.T) {
	t.Parallel()
	c := connect(t)
	_, err := acemq.NewConsumer(c, "q", func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() },
		acemq.WithConsumerRetry(acemq.RetryPolicy{Delays: []time.Duration{acemq.MaxDelay + time.Second}, ThroughDelay: true}))
	require.ErrorContains(t, err, "RetryPolicy.Delays[0] is 74565h24m16s, longer than MaxDelay (74565h24m15s)")
}

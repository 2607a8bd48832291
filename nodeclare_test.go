package acemq_test

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNoDeclareFailsFastNamingWhatIsMissing(t *testing.T) {
	t.Parallel()
	policy := acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}}
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url, acemq.WithRetryPolicy(policy))
		q := consumerQueue(t, url, policy)
		handle := func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() }

		// Nothing exists: every queue is named.
		cons, err := acemq.NewConsumer(c, q, handle, acemq.NoDeclare())
		require.NoError(t, err, "NoDeclare declares nothing, so NewConsumer has nothing to fail on")
		err = cons.Run(ctxT(t))
		require.Error(t, err)
		assert.Equal(t, `acemq: consumer of "`+q+`" was given NoDeclare, but these queues do not exist: `+
			q+", "+q+".dlq, "+q+".parked, "+q+".retry.50ms, "+q+".retry.100ms (declare them, or drop NoDeclare)", err.Error())

		// The work queue and its dead-letter queue exist: the rest is named.
		require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: q}, acemq.Queue{Name: acemq.DeadLetterQueue(q)}))
		err = cons.Run(ctxT(t))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "do not exist: "+q+".parked, "+q+".retry.50ms, "+q+".retry.100ms (")
		r := acemq.NewRouter(c, q, acemq.NoDeclare())
		acemq.Route(r, handle)
		err = r.Run(ctxT(t))
		require.Error(t, err)
		assert.Contains(t, err.Error(), `router of "`+q+`" was given NoDeclare`)

		// All there (as a consumer without NoDeclare leaves them): it runs.
		_, err = acemq.NewConsumer(c, q, handle)
		require.NoError(t, err)
		got, opt := newSettlements()
		c2 := connectURL(t, url, opt, acemq.WithRetryPolicy(policy))
		cons, err = acemq.NewConsumer(c2, q, handle, acemq.NoDeclare())
		require.NoError(t, err)
		run(t, cons)
		require.NoError(t, acemq.NewPublisher[OrderPlaced](c2, "", q).Send(ctxT(t), OrderPlaced{}))
		assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	})
}

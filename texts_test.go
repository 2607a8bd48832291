package acemq_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Deposited is a payload published by pointer.
type Deposited struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// TestKeyByNamesBothTypesExactly: a KeyBy for Deposited on a
// Publisher[*Deposited] names the pointer, so the two names differ; the
// envelope's type is still the name without it.
func TestKeyByNamesBothTypesExactly(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := declareQueue(t, c)
		pub := acemq.NewPublisher[*Deposited](c, "", q, acemq.KeyBy(func(d Deposited) string { return d.Account }))
		err := pub.Send(ctxT(t), &Deposited{Account: "a-1"})
		require.Error(t, err)
		assert.EqualError(t, err, "acemq: the publisher of *Deposited was given KeyBy for Deposited: KeyBy's function must take the publisher's type")

		pub2 := acemq.NewPublisher[Deposited](c, "", q, acemq.KeyBy(func(d *Deposited) string { return d.Account }))
		assert.EqualError(t, pub2.Send(ctxT(t), Deposited{}), "acemq: the publisher of Deposited was given KeyBy for *Deposited: KeyBy's function must take the publisher's type")
		empty(t, c, q)

		ok := acemq.NewPublisher[*Deposited](c, "", q, acemq.KeyBy(func(d *Deposited) string { return d.Account }))
		require.NoError(t, ok.Send(ctxT(t), &Deposited{Account: "a-1", Cents: 5}))
		env, err := acemq.EnvelopeOf(take(t, c, q).Message)
		require.NoError(t, err)
		assert.Equal(t, "Deposited", env.Type, "the envelope's type has no pointer")
		assert.Equal(t, "a-1", env.Key)
	})
}

// TestUnroutableToAnOrderedQueueSaysWhereToPublish: a Send to the default
// exchange keyed with an ordered queue's name, which is an exchange in
// front of partitions and no queue, says to publish to that exchange; one
// to a name that is nothing says only that it was unroutable.
func TestUnroutableToAnOrderedQueueSaysWhereToPublish(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := orderedQueue(t, url, 2)
		_, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[Deposited]) acemq.Ack { return acemq.Done() },
			acemq.Ordered(acemq.OrderPolicy{Partitions: 2}))
		require.NoError(t, err)

		err = acemq.NewPublisher[Deposited](c, "", q).Send(ctxT(t), Deposited{}, acemq.MessageID("m-1"))
		require.ErrorIs(t, err, acemq.ErrUnroutable)
		hint := fmt.Sprintf(`; %[1]q is an ordered queue: publish to the exchange %[1]q with a Key, not to the default exchange`, q)
		assert.True(t, strings.HasPrefix(err.Error(), "acemq: publishing m-1: "+transportPrefix(url)), err.Error())
		assert.True(t, strings.HasSuffix(err.Error(), hint), err.Error())
		assert.Equal(t, 1, strings.Count(err.Error(), "ordered queue"), err.Error())

		// SendAll: each result says it.
		for _, r := range acemq.NewPublisher[Deposited](c, "", q).SendAll(ctxT(t), []Deposited{{}, {}, {}}) {
			require.ErrorIs(t, r.Err, acemq.ErrUnroutable)
			assert.Contains(t, r.Err.Error(), hint)
		}

		// The exchange it names takes the message.
		require.NoError(t, acemq.NewPublisher[Deposited](c, q, "").Send(ctxT(t), Deposited{}, acemq.Key("a-1")))

		// A name that is nothing gets no hint.
		other := acemqtestQueue(t) + "-nothing"
		err = acemq.NewPublisher[Deposited](c, "", other).Send(ctxT(t), Deposited{})
		require.ErrorIs(t, err, acemq.ErrUnroutable)
		assert.NotContains(t, err.Error(), "ordered queue")
	})
}

package quorumtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/tools/brokerctl"
)

// Step is the message the engine test's consumers take.
type Step struct {
	N int `json:"n"`
}

// TestQueueTypesOnQuorumVhostEngine: in a vhost whose default queue type
// is quorum, a plain consumer's queue, .dlq, .parked and retry tiers and
// an ordered consumer's partitions, members queue and slot leases are
// classic, as declared without Quorum(); with Quorum() they are quorum,
// except the members queue and the leases, which are always classic.
func TestQueueTypesOnQuorumVhostEngine(t *testing.T) {
	t.Parallel()
	url := brokerctl.TempVhost(t, acemqtest.RabbitMQ(t), "quorum")
	for _, quorum := range []bool{false, true} {
		c := connect(t, url)
		opts := []acemq.ConsumerOption{}
		if quorum {
			opts = append(opts, acemq.Quorum())
		}
		h := func(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() }
		plain := acemqtest.QueueName(t, "q")
		_, err := acemq.NewConsumer(c, plain, h, opts...)
		require.NoError(t, err)
		ordered := acemqtest.QueueName(t, "q")
		cons, err := acemq.NewConsumer(c, ordered, h, append(opts, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}))...)
		require.NoError(t, err)
		run(t, cons)
		within(t, 30*time.Second, "the ordered consumer holding its partitions", func() bool { return len(cons.Partitions()) == 2 })

		qs, err := brokerctl.Queues(context.Background(), brokerctl.VhostOf(url))
		require.NoError(t, err)
		want := map[string]string{ordered + ".members": "classic", ordered + ".slot.0": "classic"}
		typ := "classic"
		if quorum {
			typ = "quorum"
		}
		for _, q := range []string{plain, acemq.DeadLetterQueue(plain), acemq.ParkingQueue(plain), acemq.PartitionQueue(ordered, 0), acemq.PartitionQueue(ordered, 1), acemq.DeadLetterQueue(ordered)} {
			want[q] = typ
		}
		for _, d := range acemq.DefaultRetryPolicy().Delays {
			want[acemq.RetryQueue(plain, d)] = typ
		}
		for q, w := range want {
			require.Contains(t, qs, q)
			require.Equal(t, w, qs[q].Type, "type of %s (Quorum %v)", q, quorum)
		}
		require.True(t, qs[ordered+".members"].Durable, "members queue durable")
		require.True(t, qs[ordered+".slot.0"].Exclusive, "slot lease exclusive")
	}
}

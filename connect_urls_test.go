package acemq_test

import (
	"context"
	"strings"
	"testing"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// connectCluster is the Connect of docs/cluster.md: the nodes of a
// three-node cluster as a URL list, every consumer's queues quorum queues.
func connectCluster(ctx context.Context) (*acemq.Conn, error) {
	mq, err := acemq.Connect(ctx,
		"amqp://app:secret@rabbit-1:5672/orders,amqp://app:secret@rabbit-2:5672/orders,amqp://app:secret@rabbit-3:5672/orders",
		acemq.WithQuorumQueues())
	return mq, err
}

// connectVhost is the Connect of docs/rabbitmq.md: one node, the vhost
// "orders".
func connectVhost(ctx context.Context) (*acemq.Conn, error) {
	mq, err := acemq.Connect(ctx, "amqp://app:secret@rabbit.internal:5672/orders")
	return mq, err
}

// TestTheDocsURLsAreTaken runs the Connects of docs/cluster.md and
// docs/rabbitmq.md with a ctx that has ended, so nothing is dialled: each
// URL is taken (a URL or list Connect refuses fails otherwise, naming the
// entry), the error wraps ctx's, and no password shows in it.
func TestTheDocsURLsAreTaken(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, connect := range map[string]func(context.Context) (*acemq.Conn, error){"cluster": connectCluster, "vhost": connectVhost} {
		mq, err := connect(ctx)
		require.Error(t, err, name)
		require.Nil(t, mq)
		assert.ErrorIs(t, err, context.Canceled, name)
		assert.False(t, strings.Contains(err.Error(), "secret"), "%s: %v", name, err)
	}
	// What the test relies on: a URL Connect cannot take fails as such,
	// ended ctx or not.
	_, err := acemq.Connect(ctx, "amqp://app:secret@rabbit-1:5672/orders,amqp://app:secret@rabbit-2:77777/orders")
	require.Error(t, err)
	assert.NotErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "entry 2")
}

package acemq_test

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConnectURLListErrors: a bad entry in a URL list fails Connect with
// its position and without any entry's password.
func TestConnectURLListErrors(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-in-a-list"
	node := "amqp://u:" + secret + "@127.0.0.1:1/"
	for _, tc := range []struct {
		name, url, want string
	}{
		{"an empty entry", node + ",," + node, "entry 2 of the URL list"},
		{"a memory URL among nodes", node + ",memory://x", "entry 2 of the URL list amqp://u:xxxxx@127.0.0.1:1/,memory://x is a memory:// URL"},
		{"another scheme", "http://u:" + secret + "@h/," + node, "entry 1 of the URL list"},
		{"an unparsable entry", node + ",amqp://u:" + secret + "@127.0.0.1:77777/", "entry 2 of the URL list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := acemq.Connect(context.Background(), tc.url)
			if c != nil {
				_ = c.Close()
			}
			require.Error(t, err)
			t.Logf("%v", err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), secret)
			// A memory URL among nodes is Connect's to refuse; the rest
			// are the RabbitMQ transport's, which Connect wraps.
			want := "acemq: connecting: rabbitmq: "
			if strings.Contains(tc.url, "memory://") {
				want = "acemq: entry 2"
			}
			assert.True(t, strings.HasPrefix(err.Error(), want), "%q", err)
			assert.Equal(t, 1, countPrefix(err.Error()), "%q", err)
		})
	}
	assert.Equal(t, "amqp://u:xxxxx@a/,amqps://v:xxxxx@b/", acemq.Redact("amqp://u:p1@a/,amqps://v:p2@b/"))
}

// TestConnectURLListSkipsADeadNode: one node of the list that nothing
// listens on does not keep Connect from the others, whichever it tries first.
func TestConnectURLListSkipsADeadNode(t *testing.T) {
	t.Parallel()
	broker := acemqtest.RabbitMQ(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	u, err := url.Parse(broker)
	require.NoError(t, err)
	u.Host = dead
	list := u.String() + "," + broker
	for range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c, err := acemq.Connect(ctx, list)
		cancel()
		require.NoError(t, err, "Connect to %s", acemq.Redact(list))
		q := declareQueueNamed(t, c, acemqtest.QueueName(t, "list"))
		acemqtest.DeleteQueuesAfter(t, broker, q)
		require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "L-1"}))
		require.NoError(t, c.Health(ctxT(t)))
		require.NoError(t, c.Close())
	}
	assert.False(t, strings.Contains(acemq.Redact(list), "guest:guest"), "the list is redacted: %s", acemq.Redact(list))
}

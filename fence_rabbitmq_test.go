package acemq_test

import (
	"context"
	neturl "net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/acemqtest/netproxy"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
	"github.com/stretchr/testify/require"
)

// On RabbitMQ, an instance whose network stops forwarding (the connection
// left open, as in a partition or a frozen process) cancels its running
// handler's ctx with ErrPartitionLost by its own clock, once the broker has
// not been heard within the heartbeat timeout; the delivery goes back
// unsettled and is handled again once the network is back, nothing in
// .dlq.
func TestOrderedWatchdogOnRabbitMQ(t *testing.T) {
	t.Parallel()
	url := acemqtest.RabbitMQ(t)
	q := orderedQueue(t, url, 1)
	p, err := netproxy.New(hostOfURL(t, url))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	u.Host = p.Addr()
	purl := u.String()
	tr, err := rabbitmq.Dial(ctxT(t), purl, rabbitmq.Config{Heartbeat: time.Second, MaxBackoff: 500 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	c := connectURL(t, purl, acemq.WithTransport(tr))
	pubConn := connectURL(t, url)

	started := make(chan struct{}, 1)
	cancelled := make(chan error, 1)
	var calls, done atomic.Int64
	cons, err := acemq.NewConsumer(c, q, func(ctx context.Context, m *acemq.Message[Step]) acemq.Ack {
		if calls.Add(1) == 1 {
			started <- struct{}{}
			select {
			case <-ctx.Done():
				cancelled <- context.Cause(ctx)
			case <-time.After(30 * time.Second):
				cancelled <- nil
			}
			return acemq.Reject(context.Cause(ctx))
		}
		done.Add(1)
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1}))
	require.NoError(t, err)
	run(t, cons)
	publishAll(t, pubConn, []transport.Message{keyed(t, q, Step{Key: "k", N: 1})})
	<-started
	paused := time.Now()
	p.Pause()
	cause := <-cancelled
	took := time.Since(paused)
	require.ErrorIs(t, cause, acemq.ErrPartitionLost)
	t.Logf("the handler's ctx was cancelled %v after the network stopped (heartbeat 1 s, timeout %v)", took.Round(time.Millisecond), tr.Timeout())
	p.Resume()
	within(t, time.Minute, "the delivery handled again after the network came back", func() bool { return done.Load() == 1 })
	empty(t, pubConn, acemq.DeadLetterQueue(q))
}

func hostOfURL(t *testing.T, raw string) string {
	u, err := neturl.Parse(raw)
	require.NoError(t, err)
	return u.Host
}

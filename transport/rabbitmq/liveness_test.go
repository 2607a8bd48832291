package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest/netproxy"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// LastHeard follows the broker's heartbeats on an idle connection, stops
// when the network stops forwarding (the connection left open, as in a
// partition), and time since it passes Timeout; once the network is back
// the transport reconnects and hears the broker again.
func TestLivenessThroughAPausedNetwork(t *testing.T) {
	url := brokerURL(t)
	p, err := netproxy.New(hostOf(t, url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	tr := dial(t, withHost(t, url, p.Addr()), rabbitmq.Config{Heartbeat: time.Second, DialTimeout: time.Second})
	var live transport.Liveness = tr
	if got := live.Timeout(); got != 1500*time.Millisecond {
		t.Fatalf("Timeout with a 1 s heartbeat = %v; want 1.5 s", got)
	}
	eventually(t, 10*time.Second, "LastHeard advances on an idle connection (the broker's heartbeats)", func() bool {
		return time.Since(live.LastHeard()) < 400*time.Millisecond
	})
	first := live.LastHeard()
	eventually(t, 10*time.Second, "LastHeard moves past its first reading", func() bool { return live.LastHeard().After(first) })

	p.Pause()
	time.Sleep(100 * time.Millisecond) // bytes already past the proxy arrive
	paused := live.LastHeard()
	eventually(t, 10*time.Second, "time since LastHeard passes Timeout while the network holds everything", func() bool {
		return time.Since(live.LastHeard()) > live.Timeout()
	})
	if got := live.LastHeard(); !got.Equal(paused) {
		t.Errorf("LastHeard moved from %v to %v while nothing was forwarded", paused, got)
	}

	p.Resume()
	eventually(t, 20*time.Second, "the transport hears the broker again after the network is back", func() bool {
		return time.Since(live.LastHeard()) < live.Timeout() && live.LastHeard().After(paused)
	})
	eventually(t, 20*time.Second, "Health is nil again", func() bool { return tr.Health(ctxT(t)) == nil })
}

// A node that accepts the connection but never answers (a paused network)
// costs one DialTimeout per attempt: the handshake is cut then, from a
// goroutine of ctx's, which (the race detector checks) touches only the
// socket. Dial tries again until its own ctx ends.
func TestDialTimesOutMidHandshake(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	p, err := netproxy.New(hostOf(t, url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	p.Pause()
	for range 3 {
		start := time.Now()
		ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
		tr, err := rabbitmq.Dial(ctx, withHost(t, url, p.Addr()), rabbitmq.Config{DialTimeout: 200 * time.Millisecond})
		cancel()
		if err == nil {
			_ = tr.Close()
			t.Fatal("Dial through a paused network succeeded")
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("Dial through a paused network, its ctx ending after 1s, took %v", took)
		}
	}
}

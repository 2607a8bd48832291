package quorumtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/tools/brokerctl"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
	"github.com/acemq/acemq/transport/transporttest"
)

// TestConformanceOnQuorumVhost runs the shared suite in a vhost whose
// default queue type is quorum: every queue the transport declares names
// its type, so the suite's classic queues, transient queues and leases
// stay what it asked for.
func TestConformanceOnQuorumVhost(t *testing.T) {
	url := brokerctl.TempVhost(t, acemqtest.RabbitMQ(t), "quorum")
	transporttest.Run(t, func(t *testing.T) transport.Transport {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tr, err := rabbitmq.Dial(ctx, url, rabbitmq.Config{MinBackoff: 20 * time.Millisecond, MaxBackoff: time.Second})
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		return tr
	}, transporttest.Features{QuorumQueues: true, Timeout: 15 * time.Second, ErrorPrefix: "rabbitmq: "})
}

// TestQueueTypesOnQuorumVhost: in a vhost whose default queue type is
// quorum, a classic queue, a lease and a quorum queue are each of the type
// declared, and are declared again unchanged; declaring a queue that
// exists with the vhost's type from before (declared without x-queue-type)
// as classic is
// a conflict naming x-queue-type (docs/rabbitmq.md says what to do).
func TestQueueTypesOnQuorumVhost(t *testing.T) {
	url := brokerctl.TempVhost(t, acemqtest.RabbitMQ(t), "quorum")
	tr := dial(t, url)
	ctx := ctxT(t)
	classic := acemqtest.QueueName(t, "classic")
	expiring := acemqtest.QueueName(t, "expiring")
	quorum := acemqtest.QueueName(t, "quorum")
	lease := acemqtest.QueueName(t, "lease")
	items := []transport.Topology{
		transport.Queue{Name: classic, Args: map[string]any{"x-message-ttl": 1000}},
		transport.Queue{Name: expiring, Args: map[string]any{"x-expires": 60000}},
		transport.Queue{Name: quorum, Quorum: true},
	}
	if err := tr.Declare(ctx, items...); err != nil {
		t.Fatalf("Declare: %v", err)
	}
	l, err := tr.Lease(ctx, lease)
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	defer func() { _ = l.Release(ctx) }()
	if err := tr.Declare(ctx, items...); err != nil {
		t.Fatalf("Declare again: %v", err)
	}

	// As acemq declared queues before it named their type: this vhost
	// made it a quorum queue, and the classic declaration conflicts.
	old := acemqtest.QueueName(t, "untyped")
	raw := rawChannel(t, url)
	if _, err := raw.QueueDeclare(old, true, false, false, false, nil); err != nil {
		t.Fatalf("declaring %s untyped: %v", old, err)
	}
	if err := tr.Declare(ctx, transport.Queue{Name: old}); !errors.Is(err, transport.ErrTopologyConflict) || !strings.Contains(err.Error(), "x-queue-type") {
		t.Errorf("Declare of a queue this vhost made quorum = %v; want ErrTopologyConflict naming x-queue-type", err)
	}

	qs, err := brokerctl.Queues(ctx, brokerctl.VhostOf(url))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]brokerctl.Queue{
		classic:  {Name: classic, Type: "classic", Durable: true},
		expiring: {Name: expiring, Type: "classic", Durable: true},
		quorum:   {Name: quorum, Type: "quorum", Durable: true},
		lease:    {Name: lease, Type: "classic", Exclusive: true},
		old:      {Name: old, Type: "quorum", Durable: true},
	}
	for name, w := range want {
		if got := qs[name]; got != w {
			t.Errorf("queue %s is %+v, want %+v", name, got, w)
		}
	}
}

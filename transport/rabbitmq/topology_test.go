package rabbitmq_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

func TestDeclareConflict(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	q := queue(t, tr, "conflict", map[string]any{"x-message-ttl": int64(1000)})
	err := tr.Declare(ctxT(t), transport.Queue{Name: q, Args: map[string]any{"x-message-ttl": int64(2000)}})
	if !errors.Is(err, transport.ErrTopologyConflict) || !strings.Contains(err.Error(), q) {
		t.Fatalf("redeclare with another TTL = %v; want ErrTopologyConflict naming %q", err, q)
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		t.Fatalf("the broker's 406 is not reachable through %v", err)
	}
	// The same declaration again is fine, and the transport still works.
	if err := tr.Declare(ctxT(t), transport.Queue{Name: q, Args: map[string]any{"x-message-ttl": int64(1000)}}); err != nil {
		t.Fatalf("idempotent redeclare: %v", err)
	}
}

func TestDeclareQuorumAndInspect(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	name := acemqtest.QueueName(t, "quorum")
	acemqtest.DeleteQueuesAfter(t, brokerURL(t), name)
	if err := tr.Declare(ctxT(t), transport.Queue{Name: name, Quorum: true}); err != nil {
		t.Fatal(err)
	}
	// A classic redeclaration of a quorum queue conflicts.
	if err := tr.Declare(ctxT(t), transport.Queue{Name: name}); !errors.Is(err, transport.ErrTopologyConflict) {
		t.Fatalf("classic redeclare of a quorum queue = %v; want ErrTopologyConflict", err)
	}
	if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: name}); err != nil {
		t.Fatal(err)
	}
	info, err := tr.Inspect(ctxT(t), name)
	if err != nil || info.Messages != 1 || info.Name != name {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
}

// TestDeclareTransient: a Transient queue is declared not durable, so a
// durable redeclaration of it conflicts, and the transient one again does
// not.
func TestDeclareTransient(t *testing.T) {
	t.Parallel()
	skipFrom4(t, brokerURL(t), "transient non-exclusive queues are deprecated from RabbitMQ 4.0 (transient_nonexcl_queues): acemq declares none, and make test-rabbitmq4 fails a run that used one")
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	name := acemqtest.QueueName(t, "transient")
	acemqtest.DeleteQueuesAfter(t, brokerURL(t), name)
	if err := tr.Declare(ctxT(t), transport.Queue{Name: name, Transient: true}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Declare(ctxT(t), transport.Queue{Name: name}); !errors.Is(err, transport.ErrTopologyConflict) {
		t.Fatalf("durable redeclare of a transient queue = %v; want ErrTopologyConflict", err)
	}
	if err := tr.Declare(ctxT(t), transport.Queue{Name: name, Transient: true}); err != nil {
		t.Fatalf("transient redeclare: %v", err)
	}
	err := tr.Declare(ctxT(t), transport.Queue{Name: name + ".q", Quorum: true, Transient: true})
	if err == nil || !strings.Contains(err.Error(), "always durable") {
		t.Fatalf("a transient quorum queue = %v; want an error saying quorum queues are durable", err)
	}
}

func TestInspectAndDeleteMissing(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	name := acemqtest.QueueName(t, "absent")
	if _, err := tr.Inspect(ctxT(t), name); !errors.Is(err, transport.ErrNotFound) {
		t.Fatalf("Inspect of a missing queue = %v; want ErrNotFound", err)
	}
	if err := tr.DeleteQueue(ctxT(t), name); err != nil {
		t.Fatalf("DeleteQueue of a missing queue = %v; want nil", err)
	}
	if err := tr.Declare(ctxT(t), transport.Binding{Exchange: "amq.direct", Key: "k", Queue: name}); !errors.Is(err, transport.ErrNotFound) {
		t.Fatalf("binding a missing queue = %v; want ErrNotFound", err)
	}
}

func TestDeclareRefusesBadInput(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	tests := []struct {
		name string
		item transport.Topology
	}{
		{"nil", nil},
		{"unnamed queue", transport.Queue{}},
		{"odd kind", transport.Exchange{Name: "x", Kind: "sideways"}},
		{"binding without queue", transport.Binding{Exchange: "amq.direct"}},
		{"bad argument", transport.Queue{Name: "q", Args: map[string]any{"x": struct{}{}}}},
		{"hash-header not a string", transport.Exchange{Name: "x", Kind: "x-consistent-hash", Args: map[string]any{"hash-header": int32(5)}}},
		{"exchange binding from the default exchange", transport.ExchangeBinding{Destination: "amq.fanout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tr.Declare(ctxT(t), tt.item); err == nil || !strings.HasPrefix(err.Error(), "rabbitmq: ") {
				t.Fatalf("Declare(%#v) = %v; want a rabbitmq: error", tt.item, err)
			}
		})
	}
}

// TestRedeclaredAfterReconnect deletes a declared queue behind the
// transport's back, loses the connection, and finds the queue again.
func TestRedeclaredAfterReconnect(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	p := newProxy(t, hostOf(t, url))
	tr := dial(t, withHost(t, url, p.addr), rabbitmq.Config{})
	other := dial(t, url, rabbitmq.Config{})
	ex := acemqtest.QueueName(t, "ex")
	t.Cleanup(func() { _ = deleteExchange(url, ex) })
	q := queue(t, tr, "redeclared", map[string]any{"x-max-length": int64(100)})
	if err := tr.Declare(ctxT(t), transport.Exchange{Name: ex, Kind: "fanout"}, transport.Binding{Exchange: ex, Queue: q}); err != nil {
		t.Fatal(err)
	}
	// Delete the queue through a connection of its own, not tr's.
	if err := deleteBehind(url, q); err != nil {
		t.Fatal(err)
	}
	p.cut()
	eventually(t, 10*time.Second, "the queue is back", func() bool {
		_, err := other.Inspect(ctxT(t), q)
		return err == nil
	})
	if err := tr.Publish(ctxT(t), transport.Message{Exchange: ex, RoutingKey: "any"}); err != nil {
		t.Fatalf("publish through the redeclared binding: %v", err)
	}
}

func deleteBehind(url, q string) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	_, err = ch.QueueDelete(q, false, false, false)
	return err
}

func deleteExchange(url, ex string) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return ch.ExchangeDelete(ex, false, false)
}

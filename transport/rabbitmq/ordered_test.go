package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// TestMissingExchangePlugin: an exchange kind the broker lacks is refused
// with an error naming the plugin and the command that enables it, and the
// refusal (a connection error on RabbitMQ 3.x) leaves the transport's own
// connection up.
func TestMissingExchangePlugin(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tr := dial(t, url, rabbitmq.Config{})
	q := queue(t, tr, "alive", nil)
	c := consume(t, tr, q, 1)
	name := acemqtest.QueueName(t, "x")
	err := tr.ProbeKind(ctxT(t), transport.Exchange{Name: name, Kind: "x-acemq-no-such-kind"}, "rabbitmq_acemq_test_plugin")
	if err == nil {
		_ = deleteExchange(url, name)
		t.Fatal("declaring an exchange of a kind the broker lacks succeeded")
	}
	for _, want := range []string{"rabbitmq_acemq_test_plugin", "rabbitmq-plugins enable rabbitmq_acemq_test_plugin", name} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	var broker *amqp.Error
	// RabbitMQ 4 answers with a channel error rather than a connection one.
	if !errors.As(err, &broker) || broker.Code != amqp.CommandInvalid && broker.Code != amqp.PreconditionFailed {
		t.Errorf("error %v does not wrap the broker's COMMAND_INVALID (3.x) or PRECONDITION_FAILED (4.x)", err)
	}
	// The transport's connection and its consumer are untouched.
	if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: "after"}); err != nil {
		t.Fatalf("publish after the refusal: %v", err)
	}
	if d := c.next(t); d.MessageID != "after" || d.Redelivered {
		t.Errorf("the consumer got %q (redelivered %v); want after, first time", d.MessageID, d.Redelivered)
	} else if err := d.Ack(); err != nil {
		t.Errorf("Ack on the consumer's channel: %v", err)
	}
}

// TestOrderedTopologyRedeclared: an x-consistent-hash exchange, its queue
// bindings and an exchange-to-exchange binding deleted behind the
// transport's back come back after a reconnection; a deleted exchange does
// not.
func TestOrderedTopologyRedeclared(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	p := newProxy(t, hostOf(t, url))
	tr := dial(t, withHost(t, url, p.addr), rabbitmq.Config{})
	other := dial(t, url, rabbitmq.Config{})
	hash, up, gone := acemqtest.QueueName(t, "hash"), acemqtest.QueueName(t, "up"), acemqtest.QueueName(t, "gone")
	t.Cleanup(func() {
		for _, ex := range []string{hash, up, gone} {
			_ = deleteExchange(url, ex)
		}
	})
	q0, q1 := queue(t, tr, "p0", nil), queue(t, tr, "p1", nil)
	must(t, tr.Declare(ctxT(t),
		transport.Exchange{Name: hash, Kind: "x-consistent-hash", Args: map[string]any{"hash-header": "x-key"}},
		transport.Binding{Exchange: hash, Key: "1", Queue: q0},
		transport.Binding{Exchange: hash, Key: "1", Queue: q1},
		transport.Exchange{Name: up, Kind: "direct"},
		transport.ExchangeBinding{Source: up, Key: "orders", Destination: hash},
		transport.Exchange{Name: gone, Kind: "fanout"},
		transport.ExchangeBinding{Source: up, Key: "orders", Destination: gone},
	))
	must(t, tr.DeleteExchange(ctxT(t), gone))
	must(t, deleteExchange(url, hash)) // behind tr's back: its bindings go too
	p.cut()
	eventually(t, 10*time.Second, "the consistent-hash exchange is back with its bindings", func() bool {
		err := other.Publish(ctxT(t), transport.Message{Exchange: up, RoutingKey: "orders", Headers: map[string]any{"x-key": "k"}})
		return err == nil
	})
	err := other.Publish(ctxT(t), transport.Message{Exchange: gone})
	if !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("publishing to the exchange deleted before the reconnection = %v; want ErrNotFound (not declared again)", err)
	}
	n := 0
	for _, q := range []string{q0, q1} {
		info, err := other.Inspect(ctxT(t), q)
		must(t, err)
		n += info.Messages
	}
	if n != 1 {
		t.Errorf("the partitions hold %d messages; want the one published", n)
	}
}

// TestLeaseLostWithConnection: a lease ends with its connection, another
// connection takes it, and the holder's reconnection does not take it back.
func TestLeaseLostWithConnection(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	p := newProxy(t, hostOf(t, url))
	holder := dial(t, withHost(t, url, p.addr), rabbitmq.Config{})
	other := dial(t, url, rabbitmq.Config{})
	name := acemqtest.QueueName(t, "lease")
	l, err := holder.Lease(ctxT(t), name)
	must(t, err)
	_, err = other.Lease(ctxT(t), name)
	if !errors.Is(err, transport.ErrLocked) || amqpCode(err) != amqp.ResourceLocked {
		t.Fatalf("Lease of a held name = %v; want ErrLocked wrapping the broker's 405", err)
	}
	// The refusal closed only a side channel: other still works.
	if _, err := other.Inspect(ctxT(t), acemqtest.QueueName(t, "none")); !errors.Is(err, transport.ErrNotFound) {
		t.Fatalf("Inspect after the refusal = %v; want ErrNotFound", err)
	}
	p.cut()
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed within 10s of the connection loss")
	}
	var taken transport.Lease
	eventually(t, 10*time.Second, "another connection takes the lease", func() bool {
		taken, err = other.Lease(ctxT(t), name)
		return err == nil
	})
	eventually(t, 10*time.Second, "the holder reconnects", func() bool { return holder.Health(ctxT(t)) == nil })
	if _, err := holder.Lease(ctxT(t), name); !errors.Is(err, transport.ErrLocked) {
		t.Errorf("the old holder's Lease after reconnecting = %v; want ErrLocked", err)
	}
	must(t, l.Release(ctxT(t))) // lost already: nothing to do
	must(t, taken.Release(ctxT(t)))
	again, err := holder.Lease(ctxT(t), name)
	must(t, err)
	must(t, again.Release(ctxT(t)))
}

// TestHandOverResumesAfterReconnect: ConsumeHandOver consumes again after
// a connection loss; deliveries of the lost channel are stale, for Release
// too, and come again.
func TestHandOverResumesAfterReconnect(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	p := newProxy(t, hostOf(t, url))
	tr := dial(t, withHost(t, url, p.addr), rabbitmq.Config{})
	q := queue(t, tr, "sac", map[string]any{"x-single-active-consumer": true})
	for i := range 3 {
		must(t, tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: fmt.Sprint(i)}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan transport.Delivery, 16)
	done := make(chan error, 1)
	go func() { done <- tr.ConsumeHandOver(ctx, q, 3, func(d transport.Delivery) { got <- d }) }()
	t.Cleanup(func() {
		cancel()
		for {
			select {
			case d := <-got:
				_ = d.Release()
			case <-done:
				return
			}
		}
	})
	next := func() transport.Delivery {
		t.Helper()
		select {
		case d := <-got:
			return d
		case <-time.After(15 * time.Second):
			t.Fatal("no delivery within 15s")
			return transport.Delivery{}
		}
	}
	var old []transport.Delivery
	for range 3 {
		old = append(old, next())
	}
	p.cut()
	for i := range 3 {
		d := next()
		if d.MessageID != fmt.Sprint(i) || !d.Redelivered {
			t.Fatalf("after the cut got %q (redelivered %v); want %d redelivered", d.MessageID, d.Redelivered, i)
		}
		must(t, d.Ack())
	}
	if err := old[0].Release(); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Errorf("Release of a delivery of the lost channel = %v; want a stale error", err)
	}
	if err := old[1].Ack(); err == nil {
		t.Error("Ack of a delivery of the lost channel succeeded")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ConsumeHandOver returned %v; want nil", err)
		}
		done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("ConsumeHandOver did not return")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func amqpCode(err error) int {
	var e *amqp.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

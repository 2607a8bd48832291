package acemq_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
)

// Topology lists the queue, the ladder with the tiers of the consumer's own
// policy, and its bindings; Delete removes them, and the exchange a test
// declared, leaving nothing behind.
func TestTopologyAndDelete(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := acemqtest.Memory(t)
	mq, err := acemq.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer mq.Close()
	x := acemq.Exchange{Name: "orders-x", Kind: "topic"}
	if err := mq.Declare(ctx, x); err != nil {
		t.Fatal(err)
	}
	policy := acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{10 * time.Millisecond, 250 * time.Millisecond}}
	c, err := acemq.NewConsumer(mq, "orders", func(context.Context, *acemq.Message[string]) acemq.Ack { return acemq.Done() },
		acemq.WithConsumerRetry(policy), acemq.Bind(x.Name, "order.*"))
	if err != nil {
		t.Fatal(err)
	}
	r := acemq.NewRouter(mq, "mixed")
	var queues []string
	var bindings []acemq.Binding
	for _, it := range append(c.Topology(), r.Topology()...) {
		switch v := it.(type) {
		case acemq.Queue:
			queues = append(queues, v.Name)
		case acemq.Binding:
			bindings = append(bindings, v)
		}
	}
	want := []string{"orders", "orders.dlq", "orders.parked", "orders.retry.10ms", "orders.retry.250ms",
		"mixed", "mixed.dlq", "mixed.parked", "mixed.retry.1s", "mixed.retry.5s", "mixed.retry.30s", "mixed.retry.2m0s"}
	if !slices.Equal(queues, want) {
		t.Errorf("queues %q\nwant %q", queues, want)
	}
	if wantB := []acemq.Binding{{Exchange: x.Name, Key: "order.*", Queue: "orders"}}; !slices.Equal(bindings, wantB) {
		t.Errorf("bindings %+v, want %+v", bindings, wantB)
	}
	// The slice is the caller's: changing it changes nothing the consumer declares.
	topo := c.Topology()
	topo[0] = acemq.Queue{Name: "elsewhere"}
	if q := c.Topology()[0].(acemq.Queue); q.Name != "orders" {
		t.Errorf("a caller's change reached the consumer: %q", q.Name)
	}

	all := append(append(c.Topology(), r.Topology()...), x)
	if err := mq.Delete(ctx, all...); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, q := range want {
		if _, err := mq.Transport().Inspect(ctx, q); !errors.Is(err, transport.ErrNotFound) {
			t.Errorf("queue %q after Delete: %v, want ErrNotFound", q, err)
		}
	}
	err = mq.Transport().Publish(ctx, transport.Message{Exchange: x.Name, RoutingKey: "order.new", Body: []byte("{}")})
	if !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("publish to the deleted exchange: %v, want ErrNotFound", err)
	}
	if err := mq.Delete(ctx, all...); err != nil {
		t.Errorf("deleting again: %v, want nil", err)
	}
	var nilConsumer *acemq.Consumer[string]
	if got := nilConsumer.Topology(); got != nil {
		t.Errorf("a nil consumer's topology: %v", got)
	}
	_ = mq.Close()
	if err := mq.Delete(ctx, x); !errors.Is(err, acemq.ErrClosed) {
		t.Errorf("Delete after Close: %v, want ErrClosed", err)
	}
}

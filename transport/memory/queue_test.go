package memory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
)

// consume runs tr.Consume on a goroutine, forwarding deliveries to the
// returned channel. stop cancels it and returns what Consume returned.
func consume(t *testing.T, tr transport.Transport, queue string, prefetch int) (<-chan transport.Delivery, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan transport.Delivery, 1024)
	done := make(chan error, 1)
	go func() { done <- tr.Consume(ctx, queue, prefetch, func(d transport.Delivery) { ch <- d }) }()
	var result error
	stopped := false
	stop := func() error {
		if !stopped {
			cancel()
			result, stopped = <-done, true
		}
		return result
	}
	t.Cleanup(func() { _ = tr.Close(); _ = stop() })
	return ch, stop
}

func next(t *testing.T, ch <-chan transport.Delivery) transport.Delivery {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery")
	}
	return transport.Delivery{}
}

func ids(t *testing.T, tr transport.Transport, queue string) []string {
	t.Helper()
	var out []string
	for {
		d, ok := get(t, tr, queue)
		if !ok {
			return out
		}
		out = append(out, d.MessageID)
		must(t, d.Ack())
	}
}

func publish(t *testing.T, tr transport.Transport, queue string, idList ...string) {
	t.Helper()
	for _, id := range idList {
		must(t, tr.Publish(context.Background(), transport.Message{RoutingKey: queue, MessageID: id, Headers: map[string]any{"h": id}}))
	}
}

func TestTTLExpiresFromTheHeadInOrder(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := client(t, b)
	ctx := context.Background()
	must(t, tr.Declare(ctx,
		transport.Queue{Name: "dlq"},
		transport.Queue{Name: "tier", Args: map[string]any{"x-message-ttl": 30.0, "x-dead-letter-exchange": ""}},
		transport.Exchange{Name: "dlx", Kind: "fanout"},
		transport.Binding{Exchange: "dlx", Queue: "dlq"},
		transport.Queue{Name: "tier2", Args: map[string]any{"x-message-ttl": int32(10), "x-dead-letter-exchange": "dlx"}},
		transport.Queue{Name: "drop", Args: map[string]any{"x-message-ttl": int64(10)}},
	))
	publish(t, tr, "drop", "gone")
	publish(t, tr, "tier2", "a", "b", "c")
	waitFor(t, "three dead letters", func() bool { return inspect(t, b, "dlq").Messages == 3 })
	if got := ids(t, tr, "dlq"); !equal(got, []string{"a", "b", "c"}) {
		t.Errorf("dead letters in order %v; want a b c", got)
	}
	waitFor(t, "the drop queue to empty", func() bool { return inspect(t, b, "drop").Messages == 0 })

	// Without a routing key the message keeps its own: "tier" itself. It
	// expired there already, so RabbitMQ's cycle rule drops it.
	publish(t, tr, "tier", "cycle")
	waitFor(t, "the cycle to be dropped", func() bool { return inspect(t, b, "tier").Messages == 0 })
}

func TestDeadLetterHeaders(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := client(t, b)
	ctx := context.Background()
	must(t, tr.Declare(ctx,
		transport.Queue{Name: "dlq"},
		transport.Queue{Name: "work", Args: map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}},
	))
	publish(t, tr, "work", "m")
	d, _ := get(t, tr, "work")
	must(t, d.Nack(false))
	dl, ok := get(t, tr, "dlq")
	if !ok {
		t.Fatal("no dead letter")
	}
	must(t, dl.Ack())
	for k, want := range map[string]any{
		"h": "m", "x-first-death-queue": "work", "x-first-death-reason": "rejected",
		"x-last-death-reason": "rejected", "x-first-death-exchange": "",
	} {
		if dl.Headers[k] != want {
			t.Errorf("header %s = %v; want %v", k, dl.Headers[k], want)
		}
	}
	if dl.RoutingKey != "dlq" || dl.Redelivered {
		t.Errorf("dead letter RoutingKey %q Redelivered %v", dl.RoutingKey, dl.Redelivered)
	}
	if _, ok := d.Headers["x-first-death-queue"]; ok {
		t.Error("dead-lettering changed the original delivery's headers")
	}
}

func TestZeroTTLReachesOnlyAWaitingConsumer(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := client(t, b)
	must(t, tr.Declare(context.Background(), transport.Queue{Name: "q", Args: map[string]any{"x-message-ttl": 0}}))
	publish(t, tr, "q", "expired")
	if _, ok := get(t, tr, "q"); ok {
		t.Error("a message with TTL 0 waited in the queue")
	}
	ch, _ := consume(t, tr, "q", 1)
	waitFor(t, "the consumer", func() bool { return inspect(t, b, "q").Consumers == 1 })
	publish(t, tr, "q", "taken")
	if d := next(t, ch); d.MessageID != "taken" {
		t.Errorf("got %q; want taken", d.MessageID)
	}
}

func TestRequeueKeepsOrder(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	a := client(t, b)
	must(t, a.Declare(context.Background(), transport.Queue{Name: "q"}))
	publish(t, a, "q", "1", "2", "3", "4", "5")
	ch, _ := consume(t, a, "q", 3)
	d1, d2, d3 := next(t, ch), next(t, ch), next(t, ch)
	must(t, d2.Nack(true)) // back at the head
	if d := next(t, ch); d.MessageID != "2" || !d.Redelivered {
		t.Fatalf("after Nack(requeue) got %q redelivered %v; want 2, true", d.MessageID, d.Redelivered)
	}
	must(t, d1.Ack())
	must(t, d3.Ack())
	// Now 2 and 4, 5 are out; closing puts them back in order.
	waitFor(t, "the queue to empty into the consumer", func() bool { return inspect(t, b, "q").Messages == 0 })
	must(t, a.Close())
	got := ids(t, client(t, b), "q")
	if !equal(got, []string{"2", "4", "5"}) {
		t.Errorf("after Close the queue holds %v; want 2 4 5", got)
	}
}

// TestReturnsGoBackWhereTheyWere: messages taken and returned in any order
// sit where they were, as on a classic RabbitMQ queue, so a reader that
// takes a queue's head and puts it back leaves the queue as it was.
func TestReturnsGoBackWhereTheyWere(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	a := client(t, b)
	ctx := context.Background()
	must(t, a.Declare(ctx, transport.Queue{Name: "q"}))
	publish(t, a, "q", "1", "2", "3", "4", "5", "6", "7", "8")
	var held []transport.Delivery
	for range 6 {
		d, ok, err := a.Get(ctx, "q")
		if err != nil || !ok {
			t.Fatalf("Get: %v %v", ok, err)
		}
		held = append(held, d)
	}
	for _, i := range []int{2, 0, 5, 1, 4, 3} {
		must(t, held[i].Nack(true))
	}
	got := ids(t, client(t, b), "q")
	if !equal(got, []string{"1", "2", "3", "4", "5", "6", "7", "8"}) {
		t.Errorf("after the returns the queue holds %v; want 1 to 8 in order", got)
	}
}

func TestUnlimitedPrefetch(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := client(t, b)
	must(t, tr.Declare(context.Background(), transport.Queue{Name: "q"}))
	for i := range 100 {
		publish(t, tr, "q", fmt.Sprint(i))
	}
	ch, stop := consume(t, tr, "q", 0)
	var held []transport.Delivery
	for range 100 {
		held = append(held, next(t, ch))
	}
	for _, d := range held {
		must(t, d.Ack())
	}
	must(t, stop())
}

func TestDeleteQueueEndsConsumers(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := client(t, b)
	ctx := context.Background()
	must(t, tr.Declare(ctx, transport.Queue{Name: "q"}))
	publish(t, tr, "q", "1", "2")
	done := make(chan error, 1)
	ch := make(chan transport.Delivery, 2)
	go func() { done <- tr.Consume(ctx, "q", 1, func(d transport.Delivery) { ch <- d }) }()
	d := next(t, ch)
	must(t, tr.DeleteQueue(ctx, "q"))
	select {
	case err := <-done:
		t.Fatalf("Consume returned %v with a delivery unsettled", err)
	case <-time.After(20 * time.Millisecond):
	}
	must(t, d.Ack()) // settling a deleted queue's delivery is harmless
	if err := <-done; !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("Consume of a deleted queue = %v; want ErrNotFound", err)
	}
}

func TestCloseEndsADrainingConsume(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := b.Connect()
	must(t, tr.Declare(context.Background(), transport.Queue{Name: "q"}))
	publish(t, tr, "q", "1")
	ch, stop := consume(t, tr, "q", 1)
	d := next(t, ch)
	errc := make(chan error, 1)
	go func() { errc <- stop() }()
	time.Sleep(10 * time.Millisecond) // let it start waiting for d
	must(t, tr.Close())
	if err := <-errc; err != nil {
		t.Errorf("Consume = %v; want nil, its ctx ended", err)
	}
	if err := d.Ack(); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Ack after Close = %v; want ErrClosed", err)
	}
	other := client(t, b)
	if got, ok := get(t, other, "q"); !ok || !got.Redelivered {
		t.Errorf("after Close the message is back: %v, redelivered %v; want true, true", ok, got.Redelivered)
	}
}

func TestPanickingHandlerLeavesNoConsumer(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := client(t, b)
	must(t, tr.Declare(context.Background(), transport.Queue{Name: "q"}))
	publish(t, tr, "q", "1", "2")
	func() {
		defer func() { _ = recover() }()
		_ = tr.Consume(context.Background(), "q", 0, func(transport.Delivery) { panic("boom") })
	}()
	if info := inspect(t, b, "q"); info.Consumers != 0 || info.Messages != 1 {
		t.Errorf("after the panic Inspect = %+v; want 0 consumers, 1 ready", info)
	}
}

func TestQuorumCountsDeliveries(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := client(t, b)
	must(t, tr.Declare(context.Background(), transport.Queue{Name: "q", Quorum: true}))
	publish(t, tr, "q", "m")
	for i := range 21 { // the default limit is 20 returns
		d, ok := get(t, tr, "q")
		if !ok {
			t.Fatalf("delivery %d missing", i+1)
		}
		if i > 0 && d.Headers["x-delivery-count"] != int64(i) {
			t.Errorf("delivery %d: x-delivery-count = %v; want %d", i+1, d.Headers["x-delivery-count"], i)
		}
		must(t, d.Nack(true))
	}
	if _, ok := get(t, tr, "q"); ok {
		t.Error("the message outlived its delivery limit")
	}
}

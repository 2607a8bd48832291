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

func TestConsumeMissingQueue(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	name := acemqtest.QueueName(t, "missing")
	err := tr.Consume(ctxT(t), name, 1, func(transport.Delivery) {})
	if !errors.Is(err, transport.ErrNotFound) || !strings.Contains(err.Error(), name) {
		t.Fatalf("Consume of a missing queue = %v; want ErrNotFound naming it", err)
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		t.Errorf("the broker's error is not reachable: %v", err)
	}
}

func TestConsumeInOrderAndDrainsOnCancel(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	q := queue(t, tr, "drain", nil)
	for i := range 20 {
		if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	c := consume(t, tr, q, 5)
	var held []transport.Delivery
	for i := range 5 {
		d := c.next(t)
		if d.MessageID != fmt.Sprint(i) {
			t.Fatalf("delivery %d is %q", i, d.MessageID)
		}
		held = append(held, d)
	}
	c.cancel()
	select {
	case err := <-c.done:
		t.Fatalf("Consume returned %v with 5 deliveries unsettled", err)
	case <-time.After(300 * time.Millisecond):
	}
	// Settle out of order, with a requeue in the middle.
	for _, i := range []int{4, 0, 2, 1} {
		if err := held[i].Ack(); err != nil {
			t.Fatalf("Ack %d: %v", i, err)
		}
	}
	if err := held[3].Nack(true); err != nil {
		t.Fatal(err)
	}
	if err := held[3].Ack(); err == nil {
		t.Error("settling a delivery twice succeeded")
	}
	select {
	case err := <-c.done:
		if err != nil {
			t.Fatalf("Consume returned %v; want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Consume did not return once everything was settled")
	}
	c.done <- nil // for the cleanup
	eventually(t, 5*time.Second, "16 messages ready again", func() bool {
		info, err := tr.Inspect(ctxT(t), q)
		return err == nil && info.Messages == 16
	})
}

// TestConsumeManyCoalesced acks thousands of deliveries from a big
// prefetch, some out of order, and checks the queue ends empty with no
// channel error.
func TestConsumeManyCoalesced(t *testing.T) {
	t.Parallel()
	const n = 3000
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	q := queue(t, tr, "coalesce", nil)
	for i := range n {
		if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	c := consume(t, tr, q, 200)
	var batch []transport.Delivery
	for range n {
		batch = append(batch, c.next(t))
		if len(batch) == 7 {
			// Reverse order within a batch; every fifth is nacked to a
			// dead end (no dead-letter exchange: dropped).
			for i := len(batch) - 1; i >= 0; i-- {
				var err error
				if i == 3 {
					err = batch[i].Nack(false)
				} else {
					err = batch[i].Ack()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			batch = batch[:0]
		}
	}
	for _, d := range batch {
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Health(ctxT(t)); err != nil {
		t.Fatalf("Health: %v", err)
	}
	c.cancel()
	if err := <-c.done; err != nil {
		t.Fatalf("Consume: %v", err)
	}
	c.done <- nil
	info, err := tr.Inspect(ctxT(t), q)
	if err != nil || info.Messages != 0 {
		t.Fatalf("Inspect = %+v, %v; want an empty queue", info, err)
	}
}

// TestStaleAckAfterReconnect takes a delivery, loses the connection, and
// checks the old delivery cannot be acked while its redelivery can.
func TestStaleAckAfterReconnect(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	p := newProxy(t, hostOf(t, url))
	tr := dial(t, withHost(t, url, p.addr), rabbitmq.Config{})
	q := queue(t, tr, "stale", nil)
	if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: "only"}); err != nil {
		t.Fatal(err)
	}
	c := consume(t, tr, q, 1)
	old := c.next(t)
	p.cut()
	again := c.next(t)
	if again.MessageID != "only" || !again.Redelivered {
		t.Fatalf("after the cut got %q redelivered=%v; want the same message redelivered", again.MessageID, again.Redelivered)
	}
	if err := old.Ack(); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("Ack of a delivery from the lost channel = %v; want a stale error", err)
	}
	if err := again.Ack(); err != nil {
		t.Fatalf("Ack of the redelivery: %v", err)
	}
	eventually(t, 5*time.Second, "the queue empties", func() bool {
		info, err := tr.Inspect(ctxT(t), q)
		return err == nil && info.Messages == 0 && info.Consumers == 1
	})
	c.cancel()
	if err := <-c.done; err != nil {
		t.Fatal(err)
	}
	c.done <- nil
}

func TestConsumeReturnsWhenClosed(t *testing.T) {
	t.Parallel()
	tr, err := rabbitmq.Dial(ctxT(t), brokerURL(t), rabbitmq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	q := queue(t, dial(t, brokerURL(t), rabbitmq.Config{}), "closing", nil)
	if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q}); err != nil {
		t.Fatal(err)
	}
	got := make(chan transport.Delivery, 1)
	done := make(chan error, 1)
	go func() { done <- tr.Consume(context.Background(), q, 1, func(d transport.Delivery) { got <- d }) }()
	d := <-got
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Ack(); err == nil {
		t.Error("Ack after Close succeeded")
	}
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Consume after Close = %v; want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Consume did not return after Close")
	}
}

// TestConsumeReturnsWhenCtxEndsAsItSubscribes: a ctx that ends while the
// subscription is being made (during Qos or Consume, or just after) never
// leaves Consume waiting. Closing the channel under those calls used to
// put two calls waiting on it at once, and one took the other's reply
// (Close's close-ok went to Qos or Consume, and Close waited for ever):
// about 1 run in 5 of 150 rounds hung.
func TestConsumeReturnsWhenCtxEndsAsItSubscribes(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	tr := dial(t, url, rabbitmq.Config{})
	q := queue(t, tr, "ctxend", nil)
	for i := range 150 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%30)*100*time.Microsecond)
		done := make(chan error, 1)
		go func() { done <- tr.Consume(ctx, q, 1, func(d transport.Delivery) { _ = d.Nack(true) }) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: Consume = %v; want nil once ctx ended", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Consume did not return within 10s of its ctx ending", i)
		}
		cancel()
	}
}

// TestRequeuesAfterCancelAreNotDealtBack: a consumer holding a whole queue
// is stopped and then puts every message back; none is dealt to it again
// (with room in its prefetch, a requeue sent before the cancel would be),
// and the queue, classic or quorum, keeps its order.
func TestRequeuesAfterCancelAreNotDealtBack(t *testing.T) {
	t.Parallel()
	const n = 200
	for _, typ := range []string{"classic", "quorum"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			tr := dial(t, brokerURL(t), rabbitmq.Config{})
			q := queue(t, tr, "putback", map[string]any{"x-queue-type": typ})
			for i := range n {
				if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: fmt.Sprintf("%03d", i)}); err != nil {
					t.Fatal(err)
				}
			}
			c := consume(t, tr, q, n)
			held := make([]transport.Delivery, n)
			for i := range held {
				held[i] = c.next(t)
			}
			c.cancel()
			for _, d := range held {
				if err := d.Nack(true); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-c.done:
				if err != nil {
					t.Fatalf("Consume returned %v", err)
				}
				c.done <- nil // for the cleanup
			case <-time.After(10 * time.Second):
				t.Fatal("Consume did not return once everything was settled")
			}
			if k := len(c.deliveries); k != 0 {
				t.Errorf("%d messages were dealt back to the stopped consumer", k)
			}
			eventually(t, 5*time.Second, "every message ready again", func() bool {
				info, err := tr.Inspect(ctxT(t), q)
				return err == nil && info.Messages == n
			})
			for i := range n {
				d, ok, err := tr.Get(ctxT(t), q)
				if err != nil || !ok {
					t.Fatalf("Get %d: %v %v", i, ok, err)
				}
				if err := d.Ack(); err != nil {
					t.Fatal(err)
				}
				if want := fmt.Sprintf("%03d", i); d.MessageID != want {
					t.Fatalf("message %d is %s, want %s: the order changed", i, d.MessageID, want)
				}
			}
		})
	}
}

package acemqtest_test

// The tests in this file are the examples docs/testing.md is cut from: a
// service's handler tested the way a service team would, once on the
// in-process broker and once on a real RabbitMQ, with the helpers of this
// package doing the finding, the naming and the cleaning up.

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

// OrderPlaced is the message the service under test handles.
type OrderPlaced struct {
	OrderID    string `json:"orderId"`
	TotalCents int64  `json:"totalCents"`
}

// errNoStock is what the handler under test fails with.
var errNoStock = errors.New("out of stock")

// handleOrder is the code under test: it ships an order, rejects one that
// charges nothing and asks for a retry when the warehouse is out of stock.
func handleOrder(stock map[string]bool) acemq.Handler[OrderPlaced] {
	return func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		switch {
		case m.Payload.TotalCents <= 0:
			return acemq.Reject(errors.New("nothing to charge"))
		case !stock[m.Payload.OrderID]:
			return acemq.Retry(errNoStock)
		}
		return acemq.Done()
	}
}

// fastRetries keeps a test's retry ladder short.
var fastRetries = acemq.RetryPolicy{MaxAttempts: 2, Delays: []time.Duration{10 * time.Millisecond}}

func TestHandleOrder(t *testing.T) {
	t.Parallel()
	brokers := []struct {
		name string
		url  func(testing.TB) string
	}{
		{"memory", acemqtest.Memory},     // always there: a broker of this test's own
		{"rabbitmq", acemqtest.RabbitMQ}, // env, local, container, or skipped
	}
	tests := []struct {
		name    string
		order   OrderPlaced
		outcome acemq.Outcome // of the last delivery
		dlq     int           // messages left on the dead-letter queue
	}{
		{"in stock", OrderPlaced{OrderID: "A-1", TotalCents: 1999}, acemq.OutcomeAcked, 0},
		{"free order", OrderPlaced{OrderID: "A-1"}, acemq.OutcomeRejected, 1},
		{"never in stock", OrderPlaced{OrderID: "B-2", TotalCents: 500}, acemq.OutcomeDeadLettered, 1},
	}
	for _, b := range brokers {
		for _, tt := range tests {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				url := b.url(t) // acemqtest.Memory or acemqtest.RabbitMQ
				queue := acemqtest.QueueName(t, "orders")

				got := consumeOne(t, url, queue, tt.order)
				if got.Outcome != tt.outcome {
					t.Errorf("outcome %q (%s), want %q", got.Outcome, got.Reason, tt.outcome)
				}
				if n := readyOn(t, url, acemq.DeadLetterQueue(queue)); n != tt.dlq {
					t.Errorf("%d messages on the dead-letter queue, want %d", n, tt.dlq)
				}
			})
		}
	}
}

// consumeOne runs the handler under test on queue, publishes order to it
// and returns the settlement of the last delivery: the one that did not
// ask for another attempt.
func consumeOne(t *testing.T, url, queue string, order OrderPlaced) acemq.Settlement {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	settled := make(chan acemq.Settlement, 8)
	mq, err := acemq.Connect(ctx, url,
		acemq.WithLogger(slog.New(slog.DiscardHandler)),
		acemq.WithRetryPolicy(fastRetries),
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer mq.Close()
	stock := map[string]bool{"A-1": true}
	orders, err := acemq.NewConsumer(mq, queue, handleOrder(stock))
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	// Everything the consumer declared, its retry tiers included, goes when
	// the test ends; by then the consumer has stopped.
	acemqtest.DeleteAfter(t, url, orders)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- orders.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	if err := acemq.NewPublisher[OrderPlaced](mq, "", queue).Send(ctx, order); err != nil {
		t.Fatalf("send: %v", err)
	}
	for {
		select {
		case s := <-settled:
			if s.Outcome != acemq.OutcomeRetried {
				return s
			}
		case <-ctx.Done():
			t.Fatalf("no settlement: %v", ctx.Err())
		}
	}
}

// readyOn counts the ready messages on queue with a Conn of its own: on a
// memory:// URL it reaches the same broker as the test's other Conns.
func readyOn(t *testing.T, url, queue string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mq, err := acemq.Connect(ctx, url, acemq.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer mq.Close()
	info, err := mq.Transport().Inspect(ctx, queue)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	return info.Messages
}

// reserveStock is a handler that waits 30 seconds when stock runs low.
func reserveStock(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
	if m.Envelope.Headers["x-stock"] == "low" {
		return acemq.RetryAfter(30*time.Second, errors.New("stock is low"))
	}
	return acemq.Done()
}

// TestReserveStock tests a handler on its own: no broker, no Conn.
func TestReserveStock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ack := reserveStock(ctx, &acemq.Message[OrderPlaced]{
		Payload:  OrderPlaced{OrderID: "A-3"},
		Envelope: &acemq.Envelope{ID: "m-1", Attempt: 1, Headers: map[string]any{"x-stock": "low"}},
	})
	if ack.Kind() != acemq.AckRetry || ack.Delay() != 30*time.Second {
		t.Errorf("got %s after %v: %v", ack.Kind(), ack.Delay(), ack.Err())
	}
}

// TestFreeOrderOnMemory is a unit test on the in-process broker: a free
// order is rejected, and the dead-letter queue holds it.
func TestFreeOrderOnMemory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	settled := make(chan acemq.Settlement, 8)
	record := func(_ context.Context, s acemq.Settlement) { settled <- s }
	url := acemqtest.Memory(t)
	mq, err := acemq.Connect(ctx, url, acemq.WithRetryPolicy(fastRetries), acemq.OnSettled(record))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer mq.Close()
	orders, err := acemq.NewConsumer(mq, "orders", handleOrder(nil))
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- orders.Run(runCtx) }()
	if err := acemq.NewPublisher[OrderPlaced](mq, "", "orders").Send(ctx, OrderPlaced{OrderID: "A-9"}); err != nil {
		t.Fatalf("send: %v", err)
	}
	if s := <-settled; s.Outcome != acemq.OutcomeRejected {
		t.Errorf("outcome %q (%s), want rejected", s.Outcome, s.Reason)
	}
	stop()
	if err := <-ran; err != nil {
		t.Errorf("run: %v", err)
	}
	info, err := mq.Transport().Inspect(ctx, acemq.DeadLetterQueue("orders"))
	if err != nil || info.Messages != 1 {
		t.Errorf("the dead-letter queue: %d messages (%v), want 1", info.Messages, err)
	}
}

// TestDeleteWhatYouDeclared declares an exchange of its own and has
// DeleteAfter remove it when the test ends.
func TestDeleteWhatYouDeclared(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := acemqtest.Memory(t)
	mq, err := acemq.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer mq.Close()
	x := acemq.Exchange{Name: acemqtest.QueueName(t, "events"), Kind: "topic"}
	// Registered first, so it runs last: the exchange is gone by then.
	t.Cleanup(func() { checkGone(t, url, x.Name) })
	if err := mq.Declare(ctx, x); err != nil {
		t.Fatalf("declare: %v", err)
	}
	acemqtest.DeleteAfter(t, url, acemqtest.Declarations{x})
}

// checkGone fails t unless a publish to exchange finds no exchange.
func checkGone(t *testing.T, url, exchange string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mq, err := acemq.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer mq.Close()
	if err := acemq.NewPublisher[OrderPlaced](mq, exchange, "k").Send(ctx, OrderPlaced{}); !errors.Is(err, acemq.ErrNotFound) {
		t.Errorf("a publish to the deleted exchange: %v, want ErrNotFound", err)
	}
}

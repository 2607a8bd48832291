package patterns_test

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
)

// consumeFor runs a consumer until stop is called, which reports any error
// Run returned.
func consumeFor[T any](c *acemq.Consumer[T]) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Println("run:", err)
		}
	}
}

// Request sends a value and waits for the answer; the handler on the
// other side answers with Reply.
func ExampleRequest() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mq, err := acemq.Connect(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mq.Close()

	pricing, err := acemq.NewConsumer(mq, "pricing", func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		return acemq.AckOf(patterns.Reply(ctx, mq, m.Envelope, Quote{OrderID: m.Payload.OrderID, Cents: m.Payload.TotalCents * 2}))
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	stop := consumeFor(pricing)
	defer stop()

	quote, err := patterns.Request[OrderPlaced, Quote](ctx, mq, "", "pricing", OrderPlaced{OrderID: "A-1", TotalCents: 1250})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s costs %d cents\n", quote.OrderID, quote.Cents)
	// Output: A-1 costs 2500 cents
}

// Replay moves dead letters back to work once the cause is fixed, with
// their IDs and headers, Attempt back at 1 and Error cleared.
func ExampleReplay() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mq, err := acemq.Connect(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mq.Close()
	if err := mq.Declare(ctx, acemq.Queue{Name: "orders"}, acemq.Queue{Name: "orders.dlq"}); err != nil {
		fmt.Println(err)
		return
	}
	pub := acemq.NewPublisher[OrderPlaced](mq, "", "orders.dlq")
	for _, id := range []string{"A-1", "B-2", "A-3"} {
		if err := pub.Send(ctx, OrderPlaced{OrderID: id}, acemq.Header("x-region", id[:1])); err != nil {
			fmt.Println(err)
			return
		}
	}

	onlyA := patterns.Filter(func(e *acemq.Envelope) bool { return e.Headers["x-region"] == "A" })
	report, err := patterns.Replay(ctx, mq, "orders.dlq", "orders", onlyA, patterns.Rate(100))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("moved %d, skipped %d, failed %d\n", report.Moved, report.Skipped, report.Failed)
	// Output: moved 2, skipped 1, failed 0
}

// A routing slip sends one message through several queues; each step's
// handler is wrapped in Forward.
func ExampleItinerary() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mq, err := acemq.Connect(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mq.Close()

	arrived := make(chan Trip, 1)
	for _, name := range []string{"validate", "price", "ship"} {
		h := patterns.Chain(func(_ context.Context, m *acemq.Message[Trip]) acemq.Ack {
			m.Payload.Visited = append(m.Payload.Visited, name)
			if len(patterns.Steps(m.Envelope)) == 0 {
				arrived <- m.Payload
			}
			return acemq.Done()
		}, patterns.Forward[Trip](mq))
		step, err := acemq.NewConsumer(mq, name, h)
		if err != nil {
			fmt.Println(err)
			return
		}
		stop := consumeFor(step)
		defer stop()
	}

	err = acemq.NewPublisher[Trip](mq, "", "validate").Send(ctx, Trip{}, patterns.Itinerary("price", "ship"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println((<-arrived).Visited)
	// Output: [validate price ship]
}

// A handler guarded by WithIdempotency runs once per message ID, however
// many times the message is delivered.
func ExampleWithIdempotency() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	settled := make(chan acemq.Outcome, 2)
	mq, err := acemq.Connect(ctx, "memory://",
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s.Outcome }))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mq.Close()

	charges := 0
	handler := patterns.Chain(func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		charges++
		return acemq.Done()
	},
		patterns.WithTimeout[OrderPlaced](10*time.Second),
		patterns.WithIdempotency[OrderPlaced](patterns.NewMemoryStore()))
	payments, err := acemq.NewConsumer(mq, "payments", handler)
	if err != nil {
		fmt.Println(err)
		return
	}
	stop := consumeFor(payments)
	defer stop()

	pub := acemq.NewPublisher[OrderPlaced](mq, "", "payments")
	for range 2 {
		if err := pub.Send(ctx, OrderPlaced{OrderID: "A-1"}, acemq.MessageID("charge-A-1")); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println(<-settled, <-settled, "charges:", charges)
	// Output: acked acked charges: 1
}

// Bisect gives a batch consumer per-message Acks when its handler writes the
// batch in one statement: the batch that fails is split until the bad row
// is alone, and only that row goes down the retry ladder.
func ExampleBisect() {
	ctx := context.Background()
	settled := make(chan acemq.Settlement, 8)
	mq, err := acemq.Connect(ctx, "memory://example-bisect",
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mq.Close()

	// insertAll stands for one INSERT of every row, in one transaction: the
	// database takes them all or none.
	calls := 0
	insertAll := func(_ context.Context, batch []*acemq.Message[OrderPlaced]) error {
		calls++
		for _, m := range batch {
			if m.Payload.TotalCents < 0 {
				return acemq.Fatal(fmt.Errorf("order %s: a negative total violates check constraint", m.Payload.OrderID))
			}
		}
		return nil
	}
	ledger, err := acemq.NewBatchConsumer(mq, "ledger", patterns.Bisect(insertAll),
		acemq.BatchSize(8), acemq.BatchWait(50*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	orders := []OrderPlaced{{"A-1", 100}, {"A-2", 200}, {"A-3", -5}, {"A-4", 400}, {"A-5", 500}, {"A-6", 600}, {"A-7", 700}, {"A-8", 800}}
	for _, r := range acemq.NewPublisher[OrderPlaced](mq, "", "ledger").SendAll(ctx, orders) {
		if r.Err != nil {
			fmt.Println(r.Err)
			return
		}
	}
	stop := consumeFor(ledger)
	acked := 0
	for range orders {
		s := <-settled
		if s.Outcome == acemq.OutcomeAcked {
			acked++
			continue
		}
		fmt.Println(s.Outcome+":", s.Reason)
	}
	stop()
	fmt.Println("acked:", acked, "calls:", calls)
	// Output:
	// dead_lettered: order A-3: a negative total violates check constraint
	// acked: 7 calls: 6
}

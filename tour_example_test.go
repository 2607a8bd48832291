package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
)

// The tour from the README and docs/getting-started.md: a Conn with an
// interceptor each way, a consumer whose handler is wrapped in middleware,
// a publisher, and the outcomes the deliveries settle into.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tour(ctx); err != nil {
		log.Fatal(err)
	}
	// Unordered output:
	// A-1 attempt 1: retried (the warehouse is busy)
	// A-2 attempt 1: dead_lettered (nothing to charge)
	// A-1 attempt 2: acked
}

// tour is the program the README and docs/getting-started.md cut their
// snippets from, as a function that returns its error.
func tour(ctx context.Context) error {
	settled := make(chan acemq.Settlement, 8)
	mq, err := acemq.Connect(ctx, "memory://tour", // or "amqp://guest:guest@127.0.0.1:5672/"
		acemq.WithPublishInterceptor(func(_ context.Context, c *acemq.PublishContext) error {
			c.SetHeader("x-tenant", "alpha") // on every message this Conn publishes
			return nil
		}),
		acemq.WithConsumeInterceptor(func(_ context.Context, c *acemq.ConsumeContext) error {
			if c.Envelope.Headers["x-tenant"] != "alpha" {
				return errors.New("not our tenant") // dead-lettered; the handler never runs
			}
			return nil
		}),
		acemq.WithRetryPolicy(acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{20 * time.Millisecond}}),
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		return err
	}
	defer mq.Close()

	ship := func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		switch {
		case m.Payload.TotalCents <= 0:
			return acemq.AckOf(acemq.Fatal(errors.New("nothing to charge"))) // dead_lettered at once
		case m.Envelope.Attempt == 1:
			return acemq.Retry(errors.New("the warehouse is busy")) // retried after 20ms
		}
		return acemq.Done() // acked
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	handler := patterns.Chain(ship,
		patterns.WithTimeout[OrderPlaced](5*time.Second),
		patterns.WithIdempotency[OrderPlaced](patterns.NewMemoryStore()))
	orders, err := acemq.NewConsumer(mq, "orders", handler, acemq.Concurrency(8))
	if err != nil {
		return err
	}
	go func() { runErr <- orders.Run(runCtx) }()

	pub := acemq.NewPublisher[OrderPlaced](mq, "", "orders")
	if err := pub.Send(ctx, OrderPlaced{OrderID: "A-1", TotalCents: 1999}, acemq.MessageID("A-1")); err != nil {
		return err
	}
	if err := pub.Send(ctx, OrderPlaced{OrderID: "A-2"}, acemq.MessageID("A-2")); err != nil {
		return err
	}

	for range 3 {
		s := <-settled
		fmt.Printf("%s attempt %d: %s", s.Envelope.ID, s.Attempt, s.Outcome)
		if s.Reason != "" {
			fmt.Printf(" (%s)", s.Reason)
		}
		fmt.Println()
	}
	stop()
	return <-runErr
}

// Shutdown in a SIGTERM handler: stop taking deliveries, let the ones in
// hand finish and settle, wait for outstanding confirms, then close. The
// cancel below stands in for the signal; in main the context comes from
// signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt).
func ExampleConn_Shutdown() {
	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()

	mq, err := acemq.Connect(ctx, "memory://shutdown",
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { fmt.Println("settled:", s.Outcome) }))
	if err != nil {
		log.Fatal(err)
	}
	started := make(chan struct{})
	orders, err := acemq.NewConsumer(mq, "orders", func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		close(started)
		time.Sleep(50 * time.Millisecond) // a handler still busy when the signal comes
		fmt.Println("handled", m.Payload.OrderID)
		return acemq.Done()
	})
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- orders.Run(context.Background()) }() // Shutdown, not ctx, stops it

	if err := acemq.NewPublisher[OrderPlaced](mq, "", "orders").Send(ctx, OrderPlaced{OrderID: "A-1"}); err != nil {
		log.Fatal(err)
	}
	<-started
	sigterm()
	<-ctx.Done()

	// Leave the drain less time than the orchestrator's grace period
	// (Kubernetes gives 30s by default), so Shutdown, not SIGKILL, ends it.
	drain, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fmt.Println("shutdown:", mq.Shutdown(drain))
	fmt.Println("Run stopped with ErrClosed:", errors.Is(<-ran, acemq.ErrClosed))
	// Output:
	// handled A-1
	// settled: acked
	// shutdown: <nil>
	// Run stopped with ErrClosed: true
}

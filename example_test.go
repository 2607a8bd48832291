package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/acemq/acemq"
)

// Interceptors are plain functions given to Connect. They run in the order
// given, on the way in only: publish interceptors before the codec, consume
// interceptors before the decode.
func ExampleConnect_interceptors() {
	ctx := context.Background()
	stampTenant := func(tenant string) acemq.PublishInterceptor {
		return func(_ context.Context, c *acemq.PublishContext) error {
			fmt.Println("publish interceptor 1: stamping", tenant)
			c.SetHeader("x-tenant", tenant)
			return nil
		}
	}
	audit := func(_ context.Context, c *acemq.PublishContext) error {
		fmt.Println("publish interceptor 2: sees x-tenant =", c.Envelope.Headers["x-tenant"])
		return nil
	}
	refuseOthers := func(_ context.Context, c *acemq.ConsumeContext) error {
		if c.Envelope.Headers["x-tenant"] != "alpha" {
			return fmt.Errorf("tenant %v is not served here", c.Envelope.Headers["x-tenant"])
		}
		fmt.Println("consume interceptor: tenant alpha, let through")
		return nil
	}
	settled := make(chan acemq.Settlement, 1)
	mq, err := acemq.Connect(ctx, "memory://example-interceptors",
		acemq.WithPublishInterceptor(stampTenant("alpha")),
		acemq.WithPublishInterceptor(audit),
		acemq.WithConsumeInterceptor(refuseOthers),
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()

	orders, err := acemq.NewConsumer(mq, "orders", func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		fmt.Println("handler: order", m.Payload.OrderID)
		return acemq.Done()
	})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		if err := orders.Run(runCtx); err != nil {
			log.Print(err)
		}
	}()

	if err := acemq.NewPublisher[OrderPlaced](mq, "", "orders").Send(ctx, OrderPlaced{OrderID: "A-1"}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("settled:", (<-settled).Outcome)
	// Output:
	// publish interceptor 1: stamping alpha
	// publish interceptor 2: sees x-tenant = alpha
	// consume interceptor: tenant alpha, let through
	// handler: order A-1
	// settled: acked
}

// Send returns once the broker confirmed the message; a refusal from a
// publish interceptor comes back as the very error it returned.
func ExamplePublisher_Send() {
	ctx := context.Background()
	errTooBig := errors.New("too big to publish")
	mq, err := acemq.Connect(ctx, "memory://example-send",
		acemq.WithPublishInterceptor(func(_ context.Context, c *acemq.PublishContext) error {
			if o, ok := c.Payload.(OrderPlaced); ok && o.TotalCents > 1_000_000 {
				return errTooBig
			}
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()
	if err := mq.Declare(ctx, acemq.Queue{Name: "invoices"}); err != nil {
		log.Fatal(err)
	}

	pub := acemq.NewPublisher[OrderPlaced](mq, "", "invoices")
	err = pub.Send(ctx, OrderPlaced{OrderID: "A-1", TotalCents: 1999}, acemq.MessageID("A-1"), acemq.Header("x-region", "eu"))
	fmt.Println("small order:", err)
	err = pub.Send(ctx, OrderPlaced{OrderID: "A-2", TotalCents: 5_000_000})
	fmt.Println("big order refused:", err == errTooBig)
	err = acemq.NewPublisher[OrderPlaced](mq, "", "no-such-queue").Send(ctx, OrderPlaced{})
	fmt.Println("unroutable:", errors.Is(err, acemq.ErrUnroutable))
	// Output:
	// small order: <nil>
	// big order refused: true
	// unroutable: true
}

// A consumer runs deliveries through the handler on its workers and settles
// each into one of five outcomes; a failed attempt climbs the retry ladder.
func ExampleNewConsumer() {
	ctx := context.Background()
	settled := make(chan acemq.Settlement, 8)
	mq, err := acemq.Connect(ctx, "memory://example-consumer",
		acemq.WithRetryPolicy(acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{10 * time.Millisecond}}),
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()

	handle := func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		if m.Envelope.Attempt < 3 {
			return acemq.Retry(errors.New("the warehouse is busy"))
		}
		return acemq.Done()
	}
	orders, err := acemq.NewConsumer(mq, "shipments", handle, acemq.Concurrency(4))
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- orders.Run(runCtx) }()

	if err := acemq.NewPublisher[OrderPlaced](mq, "", "shipments").Send(ctx, OrderPlaced{OrderID: "A-1"}); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		s := <-settled
		fmt.Printf("attempt %d: %s", s.Attempt, s.Outcome)
		if s.Reason != "" {
			fmt.Printf(" (%s)", s.Reason)
		}
		fmt.Println()
	}
	stop()
	fmt.Println("Run returned:", <-done)
	// Output:
	// attempt 1: retried (the warehouse is busy)
	// attempt 2: retried (the warehouse is busy)
	// attempt 3: acked
	// Run returned: <nil>
}

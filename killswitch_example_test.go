package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq"
)

// While the database a handler needs is down, every delivery fails. The
// kill switch sees the run of failures, pauses the consumer (the messages
// wait in their queue instead of climbing the ladder into .dlq) and, once
// the database answers again, a probe finds out and the consumer resumes.
func ExampleKillSwitch() {
	ctx := context.Background()
	mq, err := acemq.Connect(ctx, "memory://example-killswitch")
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()

	var dbDown atomic.Bool
	dbDown.Store(true)
	var handled atomic.Int64
	orders, err := acemq.NewConsumer(mq, "orders", func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		if dbDown.Load() {
			return acemq.Retry(errors.New("the database is down"))
		}
		handled.Add(1)
		return acemq.Done()
	}, acemq.KillSwitch(acemq.KillSwitchPolicy{
		Window:      time.Minute,
		MinFailures: 3,
		Threshold:   0.5,
		CoolDown:    100 * time.Millisecond, // seconds or minutes in production
	}))
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- orders.Run(runCtx) }()

	batch := make([]OrderPlaced, 20)
	for i := range batch {
		batch[i].OrderID = fmt.Sprintf("A-%d", i)
	}
	for _, r := range acemq.NewPublisher[OrderPlaced](mq, "", "orders").SendAll(ctx, batch) {
		if r.Err != nil {
			log.Fatal(r.Err)
		}
	}
	for !errors.Is(mq.Health(ctx), acemq.ErrTripped) {
		time.Sleep(time.Millisecond)
	}
	health := mq.Health(ctx).Error()
	fmt.Println(strings.Contains(health, `consumer of "orders" paused by the kill switch since`))

	dbDown.Store(false) // the next probe finds it up
	for handled.Load() < int64(len(batch)) {
		time.Sleep(time.Millisecond)
	}
	info, err := mq.Transport().Inspect(ctx, acemq.DeadLetterQueue("orders"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("handled:", handled.Load(), "dead-lettered:", info.Messages, "healthy:", mq.Health(ctx) == nil)

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// true
	// handled: 20 dead-lettered: 0 healthy: true
}

// Pause stops a consumer taking deliveries while Run goes on, from any
// goroutine: an operator's endpoint, a health check of a dependency.
// Resume takes them again.
func ExampleConsumer_Pause() {
	ctx := context.Background()
	settled := make(chan acemq.Settlement, 1)
	mq, err := acemq.Connect(ctx, "memory://example-pause",
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()
	orders, err := acemq.NewConsumer(mq, "orders", func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		fmt.Println("handled", m.Payload.OrderID)
		return acemq.Done()
	})
	if err != nil {
		log.Fatal(err)
	}
	orders.Pause() // before Run: Run starts paused
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- orders.Run(runCtx) }()

	if err := acemq.NewPublisher[OrderPlaced](mq, "", "orders").Send(ctx, OrderPlaced{OrderID: "A-1"}); err != nil {
		log.Fatal(err)
	}
	for !errors.Is(mq.Health(ctx), acemq.ErrPaused) { // until Run is running, paused
		time.Sleep(time.Millisecond)
	}
	info, err := mq.Transport().Inspect(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("waiting in the queue:", info.Messages)
	orders.Resume()
	fmt.Println((<-settled).Outcome)

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// waiting in the queue: 1
	// handled A-1
	// acked
}

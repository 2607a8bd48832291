package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/acemq/acemq"
)

// OrderEvent is the payload of the ordered example: one step of one order.
type OrderEvent struct {
	OrderID string `json:"orderId"`
	Step    string `json:"step"`
}

// An ordered consumer handles the messages of one key (here the order ID)
// one at a time, in the order they were sent, while different keys run in
// parallel. A retry happens in place: the key waits, the others go on.
func ExampleOrdered() {
	ctx := context.Background()
	mq, err := acemq.Connect(ctx, "memory://example-ordered",
		acemq.WithRetryPolicy(acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{10 * time.Millisecond}}))
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()

	var mu sync.Mutex
	steps := map[string][]string{}
	done := make(chan struct{})
	handled, failedOnce := 0, false
	handle := func(_ context.Context, m *acemq.Message[OrderEvent]) acemq.Ack {
		mu.Lock()
		defer mu.Unlock()
		if m.Payload.OrderID == "A-1" && m.Payload.Step == "paid" && !failedOnce {
			failedOnce = true // the payment service is slow: try again in place
			return acemq.Retry(errors.New("payment not confirmed yet"))
		}
		steps[m.Payload.OrderID] = append(steps[m.Payload.OrderID], m.Payload.Step)
		if handled++; handled == 6 {
			close(done)
		}
		return acemq.Done()
	}
	// Publish to the exchange named after the queue, keyed by order.
	pub := acemq.NewPublisher[OrderEvent](mq, "orders", "", // the exchange named after the queue
		acemq.KeyBy(func(e OrderEvent) string { return e.OrderID }))

	cons, err := acemq.NewConsumer(mq, "orders", handle,
		acemq.Ordered(acemq.OrderPolicy{Partitions: 16, BlockOnFailure: true}),
		acemq.Concurrency(8))
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error)
	go func() { ran <- cons.Run(runCtx) }()
	for _, step := range []string{"placed", "paid", "shipped"} {
		for _, order := range []string{"A-1", "B-2"} {
			if err := pub.Send(ctx, OrderEvent{OrderID: order, Step: step}); err != nil {
				log.Fatal(err)
			}
		}
	}
	<-done
	stop()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	fmt.Println("A-1:", strings.Join(steps["A-1"], " → "))
	fmt.Println("B-2:", strings.Join(steps["B-2"], " → "))
	// Output:
	// A-1: placed → paid → shipped
	// B-2: placed → paid → shipped
}

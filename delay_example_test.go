package acemq_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/acemq/acemq"
)

// A reminder goes out 300 ms after the order: Send returns once the broker
// holds it, and the consumer gets it no earlier, with Envelope.Due saying
// when it was due.
func ExampleAfter() {
	ctx := context.Background()
	mq, err := acemq.Connect(ctx, "memory://example-after")
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()
	got := make(chan *acemq.Envelope, 1)
	reminders, err := acemq.NewConsumer(mq, "reminders", func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		got <- m.Envelope
		return acemq.Done()
	})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = reminders.Run(runCtx) }()

	pub := acemq.NewPublisher[OrderPlaced](mq, "", "reminders")
	sent := time.Now()
	err = pub.Send(ctx, OrderPlaced{OrderID: "o-1"}, acemq.After(300*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	env := <-got
	fmt.Println("waited at least 300ms:", time.Since(sent) >= 300*time.Millisecond)
	fmt.Println("arrived after Due:", !time.Now().Before(env.Due))

	err = pub.Send(ctx, OrderPlaced{}, acemq.After(10*365*24*time.Hour))
	fmt.Println(err)
	// Output:
	// waited at least 300ms: true
	// arrived after Due: true
	// acemq: After(87600h0m0s) is longer than MaxDelay (74565h24m15s)
}

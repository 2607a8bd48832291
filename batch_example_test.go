package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/acemq/acemq"
)

// A batch consumer hands its handler several messages at once, and each
// message still settles on its own: one bad order goes to the dead-letter
// queue alone while the rest of its batch is acked.
func ExampleNewBatchConsumer() {
	ctx := context.Background()
	settled := make(chan acemq.Settlement, 8)
	mq, err := acemq.Connect(ctx, "memory://example-batch",
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()

	handle := func(_ context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
		fmt.Println("a batch of", len(batch))
		acks := make([]acemq.Ack, len(batch))
		for i, m := range batch {
			acks[i] = acemq.Done()
			if m.Payload.TotalCents < 0 {
				acks[i] = acemq.Reject(errors.New("a negative total"))
			}
		}
		return acks
	}
	invoices, err := acemq.NewBatchConsumer(mq, "invoices", handle,
		acemq.BatchSize(10), acemq.BatchWait(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}

	batch := []OrderPlaced{{OrderID: "A-1", TotalCents: 1200}, {OrderID: "A-2", TotalCents: -5}, {OrderID: "A-3", TotalCents: 800}, {OrderID: "A-4", TotalCents: 90}}
	for _, r := range acemq.NewPublisher[OrderPlaced](mq, "", "invoices").SendAll(ctx, batch) {
		if r.Err != nil {
			log.Fatal(r.Err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- invoices.Run(runCtx) }()

	outcomes := map[acemq.Outcome]int{}
	for range len(batch) {
		s := <-settled
		outcomes[s.Outcome]++
		if s.Outcome != acemq.OutcomeAcked {
			fmt.Println(s.Outcome, "to", acemq.DeadLetterQueue(s.Queue)+":", s.Reason)
		}
	}
	fmt.Println("acked:", outcomes[acemq.OutcomeAcked])
	stop()
	fmt.Println("Run returned:", <-done)
	// Output:
	// a batch of 4
	// rejected to invoices.dlq: the handler rejected it: a negative total
	// acked: 3
	// Run returned: <nil>
}

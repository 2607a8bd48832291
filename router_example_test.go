package acemq_test

import (
	"context"
	"fmt"
	"log"

	"github.com/acemq/acemq"
)

// RefundIssued is the second message type of the router example.
type RefundIssued struct {
	OrderID string `json:"orderId"`
	Cents   int64  `json:"cents"`
}

// A Router takes one queue that carries several message types and hands
// each message to the handler routed for its type; a type no route takes is
// parked.
func ExampleRoute() {
	ctx := context.Background()
	settled := make(chan acemq.Settlement, 8)
	mq, err := acemq.Connect(ctx, "memory://example-router",
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()

	billing := acemq.NewRouter(mq, "billing")
	acemq.Route(billing, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		fmt.Printf("charge %s: %d cents\n", m.Payload.OrderID, m.Payload.TotalCents)
		return acemq.Done()
	})
	acemq.Route(billing, func(_ context.Context, m *acemq.Message[RefundIssued]) acemq.Ack {
		fmt.Printf("refund %s: %d cents\n", m.Payload.OrderID, m.Payload.Cents)
		return acemq.Done()
	}, acemq.TypeName("Refund")) // the type name its producer writes
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- billing.Run(runCtx) }()

	sends := []func() error{
		func() error {
			return acemq.NewPublisher[OrderPlaced](mq, "", "billing").Send(ctx, OrderPlaced{OrderID: "A-1", TotalCents: 1250})
		},
		func() error {
			return acemq.NewPublisher[RefundIssued](mq, "", "billing", acemq.TypeName("Refund")).Send(ctx, RefundIssued{OrderID: "A-1", Cents: 250})
		},
		func() error {
			return acemq.NewPublisher[OrderPlaced](mq, "", "billing", acemq.TypeName("Chargeback")).Send(ctx, OrderPlaced{OrderID: "A-1"})
		},
	}
	for _, send := range sends {
		if err := send(); err != nil {
			log.Fatal(err)
		}
		s := <-settled
		fmt.Printf("  %s %s", s.Envelope.Type, s.Outcome)
		if s.Reason != "" {
			fmt.Printf(": %s", s.Reason)
		}
		fmt.Println()
	}
	stop()
	fmt.Println("Run returned:", <-done)
	// Output:
	// charge A-1: 1250 cents
	//   OrderPlaced acked
	// refund A-1: 250 cents
	//   Refund acked
	//   Chargeback parked: no handler for type "Chargeback" on queue "billing"
	// Run returned: <nil>
}

package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

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

// reserveStock is the handler the table test below exercises.
func reserveStock(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
	switch {
	case m.Payload.OrderID == "":
		return acemq.Reject(errors.New("the order has no ID"))
	case m.Payload.TotalCents > 1_000_000:
		return acemq.AckOf(acemq.Fatal(errors.New("over the credit limit")))
	case m.Envelope.Headers["x-stock"] == "low":
		return acemq.RetryAfter(30*time.Second, errors.New("waiting for stock"))
	}
	return acemq.Done()
}

// A handler is a function: a unit test calls it with a Message and reads
// what it asked for from the Ack it returns (Kind, Err, Delay), with no
// broker and no Conn.
func ExampleAck_Kind() {
	for _, tc := range []struct {
		name    string
		payload OrderPlaced
		headers map[string]any
		want    acemq.AckKind
	}{
		{name: "an order", payload: OrderPlaced{OrderID: "A-1", TotalCents: 1250}, want: acemq.AckDone},
		{name: "no ID", payload: OrderPlaced{TotalCents: 1}, want: acemq.AckReject},
		{name: "too big", payload: OrderPlaced{OrderID: "A-2", TotalCents: 5_000_000}, want: acemq.AckFatal},
		{name: "low stock", payload: OrderPlaced{OrderID: "A-3"}, headers: map[string]any{"x-stock": "low"}, want: acemq.AckRetry},
	} {
		if tc.headers == nil {
			tc.headers = map[string]any{}
		}
		m := &acemq.Message[OrderPlaced]{Payload: tc.payload, Envelope: &acemq.Envelope{ID: "m-1", Attempt: 1, Headers: tc.headers}}
		ack := reserveStock(context.Background(), m)
		verdict := "ok"
		if ack.Kind() != tc.want {
			verdict = fmt.Sprintf("FAIL: got %s, want %s", ack.Kind(), tc.want)
		}
		fmt.Printf("%-9s %-6s err=%v delay=%v  %s\n", tc.name, ack.Kind(), ack.Err(), ack.Delay(), verdict)
	}
	// Output:
	// an order  done   err=<nil> delay=0s  ok
	// no ID     reject err=the order has no ID delay=0s  ok
	// too big   fatal  err=over the credit limit delay=0s  ok
	// low stock retry  err=waiting for stock delay=30s  ok
}

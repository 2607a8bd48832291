package acemq_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/acemq/acemq"
)

// The sends of docs/publishing.md, as the page shows them, in functions
// that return their error; Example_publishing runs them.

// sendPlaced sends one order to the exchange "orders".
func sendPlaced(ctx context.Context, mq *acemq.Conn) error {
	pub := acemq.NewPublisher[OrderPlaced](mq, "orders", "order.placed")
	err := pub.Send(ctx, OrderPlaced{OrderID: "A-1"})
	return err
}

// sendWithOptions sends order with an option of each kind.
func sendWithOptions(ctx context.Context, pub *acemq.Publisher[OrderPlaced], order OrderPlaced) error {
	err := pub.Send(ctx, order,
		acemq.MessageID("order-A-1"), // instead of a new UUIDv7
		acemq.CorrelationID("checkout-77"),
		acemq.CausationID("cart-12"),
		acemq.Key("order-A"), // the ordering key
		acemq.Header("x-region", "eu"))
	return err
}

// sendBatch sends orders at once and logs each that failed.
func sendBatch(ctx context.Context, pub *acemq.Publisher[OrderPlaced], orders []OrderPlaced) []acemq.PublishResult {
	results := pub.SendAll(ctx, orders)
	for i, r := range results {
		if r.Err != nil {
			log.Printf("order %d (%s): %v", i, r.ID, r.Err)
		}
	}
	return results
}

// The sends of docs/publishing.md, and what a consumer finds in each
// message's envelope.
func Example_publishing() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mq, err := acemq.Connect(ctx, "memory://example-publishing")
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()
	if err := mq.Declare(ctx, acemq.Exchange{Name: "orders", Kind: "topic"}, acemq.Queue{Name: "placed"},
		acemq.Binding{Exchange: "orders", Queue: "placed", Key: "order.*"}); err != nil {
		log.Fatal(err)
	}
	got := make(chan *acemq.Envelope, 4)
	cons, err := acemq.NewConsumer(mq, "placed", func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		got <- m.Envelope
		return acemq.Done()
	})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(runCtx) }()

	if err := sendPlaced(ctx, mq); err != nil {
		log.Fatal(err)
	}
	e := <-got
	fmt.Println("sent:", e.Type, "attempt", e.Attempt)

	pub := acemq.NewPublisher[OrderPlaced](mq, "orders", "order.placed")
	if err := sendWithOptions(ctx, pub, OrderPlaced{OrderID: "A-1"}); err != nil {
		log.Fatal(err)
	}
	e = <-got
	fmt.Println("with options:", e.ID, e.CorrelationID, e.CausationID, e.Key, e.Headers["x-region"])

	results := sendBatch(ctx, pub, []OrderPlaced{{OrderID: "A-2"}, {OrderID: "A-3"}})
	for range results {
		<-got
	}
	fmt.Println("a batch of", len(results), "sent")
	stop()
	fmt.Println("Run returned:", <-ran)
	// Output:
	// sent: OrderPlaced attempt 1
	// with options: order-A-1 checkout-77 cart-12 order-A eu
	// a batch of 2 sent
	// Run returned: <nil>
}

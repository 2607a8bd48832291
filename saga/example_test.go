package saga_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
	_ "modernc.org/sqlite"
)

// Order is the state of the example's checkout saga.
type Order struct {
	Status string `json:"status"`
	Cents  int64  `json:"cents"`
}

// OrderPlaced starts a checkout.
type OrderPlaced struct {
	OrderID string `json:"orderId"`
	Cents   int64  `json:"cents"`
}

// PaymentReceived moves a checkout on.
type PaymentReceived struct {
	OrderID string `json:"orderId"`
}

// Example runs a checkout saga behind a router on the in-process broker,
// with its state in SQLite: an order placed (delivered twice), then its
// payment. The duplicate changes nothing; the payment completes the saga
// and sends a message through the outbox in the same transaction.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "acemq-saga-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // SQLite: one writer; the step's Tx is the one connection

	settled := make(chan acemq.Settlement, 8)
	mq, err := acemq.Connect(ctx, "memory://saga-example",
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mq.Close()

	ob, err := outbox.New(db, outbox.SQLite)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ob.Close()
	checkout, err := saga.New[Order](ob, "checkout")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer checkout.Close()
	if err := ob.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := checkout.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}

	if err := mq.Declare(ctx, acemq.Queue{Name: "shipping"}); err != nil {
		fmt.Println(err)
		return
	}
	ship := outbox.NewPublisher[PaymentReceived](ob, mq, "", "shipping")
	router := acemq.NewRouter(mq, "checkout")
	acemq.Route(router, saga.Handle(checkout,
		func(m *acemq.Message[OrderPlaced]) string { return m.Payload.OrderID },
		func(ctx context.Context, in *saga.Instance[Order], m *acemq.Message[OrderPlaced]) error {
			fmt.Printf("step: %s placed, new %t\n", in.ID, in.New())
			in.State = Order{Status: "awaiting payment", Cents: m.Payload.Cents}
			return nil
		}, saga.Starts()))
	acemq.Route(router, saga.Handle(checkout,
		func(m *acemq.Message[PaymentReceived]) string { return m.Payload.OrderID },
		func(ctx context.Context, in *saga.Instance[Order], m *acemq.Message[PaymentReceived]) error {
			fmt.Printf("step: %s paid, was %s\n", in.ID, in.State.Status)
			in.State.Status = "paid"
			in.Complete()
			// Committed with the state, or not at all.
			return ship.Send(ctx, in.Tx, m.Payload)
		}))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()

	// The order's ID is the ordering key of its messages: an ordered
	// consumer would handle them one at a time, in order.
	placed := acemq.NewPublisher[OrderPlaced](mq, "", "checkout", acemq.KeyBy(func(o OrderPlaced) string { return o.OrderID }))
	paid := acemq.NewPublisher[PaymentReceived](mq, "", "checkout", acemq.KeyBy(func(p PaymentReceived) string { return p.OrderID }))
	for _, send := range []func() error{
		func() error {
			return placed.Send(ctx, OrderPlaced{OrderID: "o-42", Cents: 4200}, acemq.MessageID("placed-42"))
		},
		func() error {
			return placed.Send(ctx, OrderPlaced{OrderID: "o-42", Cents: 4200}, acemq.MessageID("placed-42"))
		},
		func() error { return paid.Send(ctx, PaymentReceived{OrderID: "o-42"}, acemq.MessageID("paid-42")) },
	} {
		if err := send(); err != nil {
			fmt.Println(err)
			stop()
			<-done
			return
		}
		s := <-settled
		fmt.Println(s.Envelope.ID, s.Outcome)
	}
	stop()
	if err := <-done; err != nil {
		fmt.Println(err)
		return
	}

	snap, err := checkout.Get(ctx, "o-42")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %s, %d cents, version %d, done %t\n", snap.ID, snap.State.Status, snap.State.Cents, snap.Version, snap.Done)
	pending, err := ob.Pending(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("outbox rows for the relay:", pending)
	// Output:
	// step: o-42 placed, new true
	// placed-42 acked
	// placed-42 acked
	// step: o-42 paid, was awaiting payment
	// paid-42 acked
	// o-42: paid, 4200 cents, version 2, done true
	// outbox rows for the relay: 1
}

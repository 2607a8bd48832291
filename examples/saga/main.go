// Command saga runs a checkout as a saga: an order waits for its payment,
// and a payment timeout, scheduled through the outbox when the order is
// placed, cancels it only if it is still waiting. One order is paid in
// time and shipped; the other never is, and is cancelled. A payment that
// comes after the cancellation finds the saga over and changes nothing.
//
// It runs on SQLite in a temporary directory and on the in-process
// broker:
//
//	go run ./examples/saga
//
// Every message of the saga carries its order ID as the ordering key
// (acemq.Key), so that an ordered consumer (docs/sagas.md) handles one
// order's messages one at a time, in order; here the router has one worker,
// which does the same.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
	_ "modernc.org/sqlite"
)

// The checkout's clock, short for a demonstration.
const (
	paymentWindow = 600 * time.Millisecond // the payment timeout
	payAfter      = 100 * time.Millisecond // when order o-1 is paid
	shippingTime  = 1200 * time.Millisecond
)

// Checkout is the saga's state, stored as JSON.
type Checkout struct {
	Status string `json:"status"` // awaiting payment, paid, shipped, cancelled
	Cents  int64  `json:"cents"`
}

// The saga's messages, all on the checkout queue, correlated by OrderID.
type (
	OrderPlaced struct {
		OrderID string `json:"orderId"`
		Cents   int64  `json:"cents"`
	}
	PaymentReceived struct {
		OrderID string `json:"orderId"`
	}
	PaymentTimeout struct {
		OrderID string `json:"orderId"`
	}
	OrderShipped struct {
		OrderID string `json:"orderId"`
	}
)

// What the saga asks of other services.
type (
	ShipOrder struct {
		OrderID string `json:"orderId"`
	}
	OrderCancelled struct {
		OrderID string `json:"orderId"`
		Reason  string `json:"reason"`
	}
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "saga:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	var mu sync.Mutex
	say := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", a...)
	}
	dir, err := os.MkdirTemp("", "acemq-saga")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // SQLite has one writer; a step works through its Tx

	settled := make(chan acemq.Settlement, 64)
	mq, err := acemq.Connect(ctx, "memory://saga-example",
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		return err
	}
	defer mq.Close()

	ob, err := outbox.New(db, outbox.SQLite)
	if err != nil {
		return err
	}
	defer ob.Close()
	checkout, err := saga.New[Checkout](ob, "checkout")
	if err != nil {
		return err
	}
	defer checkout.Close()
	if err := ob.Migrate(ctx); err != nil {
		return err
	}
	if err := checkout.Migrate(ctx); err != nil {
		return err
	}

	const queue = "checkout"
	timeouts := outbox.NewPublisher[PaymentTimeout](ob, mq, "", queue)
	shipOrders := outbox.NewPublisher[ShipOrder](ob, mq, "", "warehouse")
	cancellations := outbox.NewPublisher[OrderCancelled](ob, mq, "", "notifications")

	router := acemq.NewRouter(mq, queue)
	acemq.Route(router, saga.Handle(checkout,
		func(m *acemq.Message[OrderPlaced]) string { return m.Payload.OrderID },
		func(ctx context.Context, in *saga.Instance[Checkout], m *acemq.Message[OrderPlaced]) error {
			in.State = Checkout{Status: "awaiting payment", Cents: m.Payload.Cents}
			say("%s: placed, %d cents; payment due within %s", in.ID, m.Payload.Cents, paymentWindow)
			// The timeout is a message to this very saga, published by the
			// relay once due, and only if this step commits.
			return timeouts.Send(ctx, in.Tx, PaymentTimeout{OrderID: in.ID},
				outbox.After(paymentWindow), acemq.CorrelationID(in.ID), acemq.Key(in.ID))
		}, saga.Starts()))
	acemq.Route(router, saga.Handle(checkout,
		func(m *acemq.Message[PaymentReceived]) string { return m.Payload.OrderID },
		func(ctx context.Context, in *saga.Instance[Checkout], m *acemq.Message[PaymentReceived]) error {
			if in.State.Status != "awaiting payment" {
				say("%s: a payment, but the order is %s", in.ID, in.State.Status)
				return nil
			}
			in.State.Status = "paid"
			say("%s: paid; asking the warehouse to ship", in.ID)
			return shipOrders.Send(ctx, in.Tx, ShipOrder{OrderID: in.ID}, acemq.CorrelationID(in.ID))
		}))
	acemq.Route(router, saga.Handle(checkout,
		func(m *acemq.Message[PaymentTimeout]) string { return m.Payload.OrderID },
		func(ctx context.Context, in *saga.Instance[Checkout], m *acemq.Message[PaymentTimeout]) error {
			// The timeout acts only if the saga still waits: a payment
			// that came first has moved it on.
			if in.State.Status != "awaiting payment" {
				say("%s: payment timeout, but the order is %s: nothing to do", in.ID, in.State.Status)
				return nil
			}
			in.State.Status = "cancelled"
			in.Complete()
			say("%s: payment timeout; cancelled", in.ID)
			return cancellations.Send(ctx, in.Tx, OrderCancelled{OrderID: in.ID, Reason: "no payment within " + paymentWindow.String()},
				acemq.CorrelationID(in.ID))
		}))
	acemq.Route(router, saga.Handle(checkout,
		func(m *acemq.Message[OrderShipped]) string { return m.Payload.OrderID },
		func(ctx context.Context, in *saga.Instance[Checkout], m *acemq.Message[OrderShipped]) error {
			in.State.Status = "shipped"
			in.Complete()
			say("%s: shipped; the saga is over", in.ID)
			return nil
		}))

	// The other services: a warehouse that ships a while after it is
	// asked, and a notifier that tells the customer about cancellations.
	shipped := outbox.NewPublisher[OrderShipped](ob, mq, "", queue)
	warehouse, err := acemq.NewConsumer(mq, "warehouse", func(ctx context.Context, m *acemq.Message[ShipOrder]) acemq.Ack {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return acemq.AckOf(err)
		}
		defer func() { _ = tx.Rollback() }()
		if err := shipped.Send(ctx, tx, OrderShipped{OrderID: m.Payload.OrderID}, outbox.After(shippingTime), acemq.Key(m.Payload.OrderID)); err != nil {
			return acemq.AckOf(err)
		}
		return acemq.AckOf(tx.Commit())
	})
	if err != nil {
		return err
	}
	notifier, err := acemq.NewConsumer(mq, "notifications", func(_ context.Context, m *acemq.Message[OrderCancelled]) acemq.Ack {
		say("notification to the customer: order %s cancelled (%s)", m.Payload.OrderID, m.Payload.Reason)
		return acemq.Done()
	})
	if err != nil {
		return err
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, r := range []func(context.Context) error{
		router.Run, warehouse.Run, notifier.Run,
		outbox.NewRelay(ob, mq, outbox.PollInterval(20*time.Millisecond)).Run,
	} {
		wg.Go(func() {
			if err := r(runCtx); err != nil {
				errs <- err
			}
		})
	}
	defer wg.Wait()
	defer stop()

	// KeyBy gives every message the order's ID as its ordering key.
	placed := acemq.NewPublisher[OrderPlaced](mq, "", queue, acemq.KeyBy(func(o OrderPlaced) string { return o.OrderID }))
	paid := acemq.NewPublisher[PaymentReceived](mq, "", queue, acemq.KeyBy(func(p PaymentReceived) string { return p.OrderID }))
	for _, o := range []OrderPlaced{{OrderID: "o-1", Cents: 4200}, {OrderID: "o-2", Cents: 1999}} {
		if err := placed.Send(ctx, o, acemq.CorrelationID(o.OrderID)); err != nil {
			return err
		}
	}
	time.Sleep(payAfter)
	if err := paid.Send(ctx, PaymentReceived{OrderID: "o-1"}, acemq.CorrelationID("o-1")); err != nil {
		return err
	}

	// Wait until both sagas are over.
	for {
		open, err := checkout.CountOpen(ctx)
		if err != nil {
			return err
		}
		if open == 0 {
			break
		}
		select {
		case err := <-errs:
			return err
		case <-ctx.Done():
			return fmt.Errorf("waiting for the sagas to end: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}

	// A payment that comes too late: the saga is over, so the message is
	// acked without a step (a real service would refund it).
	for len(settled) > 0 {
		<-settled
	}
	if err := paid.Send(ctx, PaymentReceived{OrderID: "o-2"}, acemq.CorrelationID("o-2"), acemq.MessageID("late-payment")); err != nil {
		return err
	}
	for late := false; !late; {
		select {
		case s := <-settled:
			if late = s.Envelope.ID == "late-payment"; late {
				say("o-2: a late payment was %s without a step: the saga is over", s.Outcome)
			}
		case <-ctx.Done():
			return fmt.Errorf("waiting for the late payment: %w", ctx.Err())
		}
	}
	for _, id := range []string{"o-1", "o-2"} {
		snap, err := checkout.Get(ctx, id)
		if err != nil {
			return err
		}
		say("%s: %s, version %d, done %t", snap.ID, snap.State.Status, snap.Version, snap.Done)
	}
	return nil
}

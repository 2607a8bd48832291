package saga_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The code of docs/sagas.md, as the page shows it, in functions that
// return their error; TestSagaPageRecipes runs them.

// The page's saga state is Checkout, the one saga_test.go declares.

// The messages the page's checkout sends.
type (
	ChargeCard     struct{ OrderID string }
	PaymentTimeout struct{ OrderID string }
	OrderCancelled struct{ OrderID string }
)

func (o OrderPlaced) order() string    { return o.OrderID }
func (p PaymentTimeout) order() string { return p.OrderID }

// orderID is the correlation ID of every message of a checkout: its
// order's ID.
func orderID[T interface{ order() string }](m *acemq.Message[T]) string { return m.Payload.order() }

// checkoutParts sets up the saga in db's outbox and routes the placed
// order to it on router; it leaves the outbox and the saga in app.
func checkoutParts(ctx context.Context, db *sql.DB, mq *acemq.Conn, router *acemq.Router, app *sagaApp) error {
	ob, err := outbox.New(db, outbox.SQLite) // or outbox.Postgres: the saga lives in the outbox's database
	if err != nil {
		return err
	}
	checkout, err := saga.New[Checkout](ob, "checkout") // table acemq_saga_checkout
	if err != nil {
		return err
	}
	if err := ob.Migrate(ctx); err != nil {
		return err
	}
	if err := checkout.Migrate(ctx); err != nil { // the saga's table and the inbox's (Check, where another job migrates)
		return err
	}
	charges := outbox.NewPublisher[ChargeCard](ob, mq, "", "payments")

	placed := saga.Handle(checkout,
		func(m *acemq.Message[OrderPlaced]) string { return m.Payload.OrderID }, // the correlation ID
		func(ctx context.Context, in *saga.Instance[Checkout], m *acemq.Message[OrderPlaced]) error {
			in.State.Status = "awaiting payment"                        // saved when the step returns nil
			return charges.Send(ctx, in.Tx, ChargeCard{OrderID: in.ID}) // an outbox.Publisher: same transaction
		},
		saga.Starts()) // this message may create the instance
	acemq.Route(router, placed) // an acemq.Handler[OrderPlaced], for a Consumer or a Router
	app.ob, app.checkout = ob, checkout
	return nil
}

// sagaApp is what checkoutParts leaves.
type sagaApp struct {
	ob       *outbox.Outbox
	checkout *saga.Saga[Checkout]
}

// orderedCheckout is the page's checkout on an ordered Router, with its
// payment timeout: it sends an order and returns the Router, to be run.
func orderedCheckout(ctx context.Context, mq *acemq.Conn, ob *outbox.Outbox, checkout *saga.Saga[Checkout]) (*acemq.Router, error) {
	timeouts := outbox.NewPublisher[PaymentTimeout](ob, mq, "checkout", "")
	cancellations := outbox.NewPublisher[OrderCancelled](ob, mq, "", "cancellations")

	onPlaced := func(ctx context.Context, in *saga.Instance[Checkout], m *acemq.Message[OrderPlaced]) error {
		in.State.Status = "awaiting payment"
		return timeouts.Send(ctx, in.Tx, PaymentTimeout{OrderID: in.ID}, acemq.Key(in.ID), outbox.After(15*time.Minute))
	}
	onTimeout := func(ctx context.Context, in *saga.Instance[Checkout], m *acemq.Message[PaymentTimeout]) error {
		if in.State.Status != "awaiting payment" {
			return nil // the payment came first: the timeout has nothing to do
		}
		in.State.Status = "cancelled"
		in.Complete()
		return cancellations.Send(ctx, in.Tx, OrderCancelled{OrderID: in.ID})
	}

	// The consumer: ordered, so one order's messages never overlap.
	router := acemq.NewRouter(mq, "checkout", acemq.Ordered(acemq.OrderPolicy{Partitions: 16}), acemq.Concurrency(8))
	acemq.Route(router, saga.Handle(checkout, orderID, onPlaced, saga.Starts()))
	acemq.Route(router, saga.Handle(checkout, orderID, onTimeout))

	// Publishers: the key is the saga's correlation ID.
	placed := acemq.NewPublisher[OrderPlaced](mq, "checkout", "") // the ordered queue's exchange
	err := placed.Send(ctx, OrderPlaced{OrderID: "o-42"}, acemq.Key("o-42"))
	return router, err
}

// TestSagaPageRecipes runs the checkout of docs/sagas.md on SQLite and
// memory://: the placed order's step saves its state and writes its
// ChargeCard through the outbox; on an ordered Router, the order's step
// schedules its payment timeout (keyed, 15 minutes out, so still in the
// outbox when the test ends).
func TestSagaPageRecipes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	db := openSQLite(t)
	mq, err := acemq.Connect(ctx, acemqtest.Memory(t), acemq.WithLogger(quiet))
	require.NoError(t, err)
	t.Cleanup(func() { _ = mq.Close() })
	require.NoError(t, mq.Declare(ctx, acemq.Queue{Name: "payments"}, acemq.Queue{Name: "cancellations"}))

	router := acemq.NewRouter(mq, "orders")
	var app sagaApp
	require.NoError(t, checkoutParts(ctx, db, mq, router, &app))
	t.Cleanup(func() { _ = app.checkout.Close(); _ = app.ob.Close() })
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 2)
	go func() { ran <- router.Run(runCtx) }()
	go func() { ran <- outbox.NewRelay(app.ob, mq, outbox.PollInterval(10*time.Millisecond)).Run(runCtx) }()
	require.NoError(t, acemq.NewPublisher[OrderPlaced](mq, "", "orders").Send(ctx, OrderPlaced{OrderID: "o-41"}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		info, err := mq.Transport().Inspect(ctx, "payments")
		require.NoError(c, err)
		require.Equal(c, 1, info.Messages, "the ChargeCard, through the outbox")
	}, 10*time.Second, 10*time.Millisecond)
	snap, err := app.checkout.Get(ctx, "o-41")
	require.NoError(t, err)
	assert.Equal(t, "awaiting payment", snap.State.Status)

	ordered, err := orderedCheckout(ctx, mq, app.ob, app.checkout)
	require.NoError(t, err)
	go func() { ran <- ordered.Run(runCtx) }()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		snap, err := app.checkout.Get(ctx, "o-42")
		require.NoError(c, err)
		require.Equal(c, "awaiting payment", snap.State.Status)
	}, 10*time.Second, 10*time.Millisecond)
	pending, err := app.ob.Pending(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), pending, "the payment timeout, due in 15 minutes")
	stop()
	for range 3 {
		require.NoError(t, <-ran)
	}
	require.NoError(t, mq.Delete(ctx, ordered.Topology()...))
}

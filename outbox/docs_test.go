package outbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/patterns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The code of docs/outbox.md, as the page shows it, in functions that
// return their error; TestOutboxPageRecipes runs them.

// setUp opens app.db (in the working directory) and migrates its outbox,
// leaving both in app.
func setUp(ctx context.Context, app *outboxApp) error {
	db, err := sql.Open("sqlite", "file:app.db?_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	ob, err := outbox.New(db, outbox.SQLite) // or outbox.Postgres
	if err != nil {
		return err
	}
	if err := ob.Migrate(ctx); err != nil { // creates acemq_outbox and its indexes
		return err
	}
	app.db, app.ob = db, ob
	return nil
}

// outboxApp is what setUp opens.
type outboxApp struct {
	db *sql.DB
	ob *outbox.Outbox
}

// placeOrder writes an order's message in the transaction that writes the
// order.
func placeOrder(ctx context.Context, db *sql.DB, ob *outbox.Outbox, mq *acemq.Conn) error {
	orders := outbox.NewPublisher[OrderPlaced](ob, mq, "", "orders")

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // a no-op once committed
	// ... write the order's rows in tx ...
	if err := orders.Send(ctx, tx, OrderPlaced{OrderID: "A-1"}); err != nil {
		return err
	}
	return tx.Commit()
}

// schedule writes two messages the relay publishes later.
func schedule(ctx context.Context, tx *sql.Tx, orders *outbox.Publisher[OrderPlaced], reminder, invoice OrderPlaced, endOfMonth time.Time) error {
	if err := orders.Send(ctx, tx, reminder, outbox.After(24*time.Hour)); err != nil {
		return err
	}
	if err := orders.Send(ctx, tx, invoice, outbox.At(endOfMonth)); err != nil {
		return err
	}
	return nil
}

// relayRows runs a relay until ctx ends.
func relayRows(ctx context.Context, ob *outbox.Outbox, mq *acemq.Conn) error {
	relay := outbox.NewRelay(ob, mq, outbox.BatchSize(256), outbox.PollInterval(500*time.Millisecond))
	err := relay.Run(ctx) // returns nil when ctx ends
	return err
}

// ship records a shipment and the message's completion in one transaction.
func ship(ctx context.Context, inbox *outbox.Inbox, db *sql.DB, messageID, orderID string) error {
	res, err := inbox.Claim(ctx, messageID, 30*time.Second)
	if err != nil || res != patterns.Claimed { // done already, or another delivery holds it
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "INSERT INTO shipments (order_id) VALUES (?)", orderID); err != nil {
		return err
	}
	if err := inbox.CompleteTx(ctx, tx, messageID, 24*time.Hour); err != nil {
		return err
	}
	return tx.Commit()
}

// TestOutboxPageRecipes runs the recipes of docs/outbox.md on SQLite in a
// directory of the test's own: the order's message reaches its queue
// through the relay, the scheduled ones wait for their time, and a
// shipment recorded through the inbox is recorded once for two deliveries.
func TestOutboxPageRecipes(t *testing.T) {
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var app outboxApp
	t.Cleanup(func() {
		if app.ob != nil {
			_ = app.ob.Close()
		}
		if app.db != nil {
			_ = app.db.Close()
		}
	})
	require.NoError(t, setUp(ctx, &app))
	db, ob := app.db, app.ob
	mq, err := acemq.Connect(ctx, acemqtest.Memory(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = mq.Close() })
	require.NoError(t, mq.Declare(ctx, acemq.Queue{Name: "orders"}))

	require.NoError(t, placeOrder(ctx, db, ob, mq))
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	orders := outbox.NewPublisher[OrderPlaced](ob, mq, "", "orders")
	require.NoError(t, schedule(ctx, tx, orders, OrderPlaced{OrderID: "R-1"}, OrderPlaced{OrderID: "I-1"}, time.Now().Add(time.Hour)))
	require.NoError(t, tx.Commit())

	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- relayRows(runCtx, ob, mq) }()
	var got acemq.Envelope
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d, ok, err := mq.Transport().Get(ctx, "orders")
		require.NoError(c, err)
		require.True(c, ok)
		env, err := acemq.EnvelopeOf(d.Message)
		require.NoError(c, err)
		got = *env
		require.NoError(c, d.Ack())
	}, 10*time.Second, 20*time.Millisecond)
	stop()
	require.NoError(t, <-ran)
	assert.Equal(t, "OrderPlaced", got.Type)
	info, err := mq.Transport().Inspect(ctx, "orders")
	require.NoError(t, err)
	assert.Zero(t, info.Messages, "the scheduled messages wait for their time")

	inbox, err := outbox.NewInbox(db, outbox.SQLite)
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(ctx))
	_, err = db.ExecContext(ctx, "CREATE TABLE shipments (order_id TEXT)")
	require.NoError(t, err)
	for range 2 { // the same delivery twice
		require.NoError(t, ship(ctx, inbox, db, got.ID, "A-1"))
	}
	var n int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM shipments").Scan(&n))
	assert.Equal(t, 1, n)
}

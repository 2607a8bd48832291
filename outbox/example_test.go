package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/patterns"
	_ "modernc.org/sqlite"
)

// OrderPlaced is what the examples publish.
type OrderPlaced struct {
	OrderID string `json:"orderId"`
}

// openExampleDB opens SQLite in a temporary directory the way the package
// recommends: a busy timeout and a single connection.
func openExampleDB() (db *sql.DB, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "acemq-outbox-example")
	if err != nil {
		return nil, nil, err
	}
	db, err = sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	return db, func() { _ = db.Close(); _ = os.RemoveAll(dir) }, nil
}

// Example writes one order in a committed transaction and one in a rolled
// back one; the relay publishes only the first.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, cleanup, err := openExampleDB()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cleanup()
	mq, err := acemq.Connect(ctx, "memory://outbox-example")
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
	if err := ob.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}

	got := make(chan string, 2)
	consumer, err := acemq.NewConsumer(mq, "orders", func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		got <- m.Payload.OrderID
		return acemq.Done()
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	orders := outbox.NewPublisher[OrderPlaced](ob, mq, "", "orders")
	for _, o := range []struct {
		id     string
		commit bool
	}{{"A-1", true}, {"A-2", false}} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		// ... the order's own rows are written in tx here ...
		if err := orders.Send(ctx, tx, OrderPlaced{OrderID: o.id}); err != nil {
			fmt.Println(err)
			return
		}
		if o.commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			fmt.Println(err)
			return
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- consumer.Run(runCtx) }()
	go func() { done <- outbox.NewRelay(ob, mq, outbox.PollInterval(10*time.Millisecond)).Run(runCtx) }()
	fmt.Println("received", <-got)
	select {
	case id := <-got:
		fmt.Println("unexpected", id)
	case <-time.After(100 * time.Millisecond):
		fmt.Println("nothing else: the rolled-back order was never published")
	}
	stop()
	for range 2 {
		if err := <-done; err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// received A-1
	// nothing else: the rolled-back order was never published
}

// ExampleInbox_CompleteTx records a handler's effect and its idempotency
// claim in one transaction; a second delivery of the same message ID finds
// the claim completed.
func ExampleInbox_CompleteTx() {
	ctx := context.Background()
	db, cleanup, err := openExampleDB()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cleanup()
	inbox, err := outbox.NewInbox(db, outbox.SQLite)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := inbox.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE shipments (order_id TEXT)"); err != nil {
		fmt.Println(err)
		return
	}
	handle := func(messageID, orderID string) error {
		res, err := inbox.Claim(ctx, messageID, 30*time.Second)
		if err != nil || res != patterns.Claimed {
			fmt.Println("claim:", res, err)
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
		fmt.Println("shipped", orderID)
		return tx.Commit()
	}
	for range 2 { // the same delivery twice
		if err := handle("msg-1", "A-1"); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// shipped A-1
	// claim: duplicate <nil>
}

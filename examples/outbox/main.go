// Command outbox tours acemq's transactional outbox: orders written with
// their message in one transaction, one of them rolled back, one scheduled
// for later, and a relay publishing what was committed, when it is due.
//
// By default it runs on SQLite in a temporary directory and on the
// in-process broker; set ACEMQ_POSTGRES_URL to use PostgreSQL and
// ACEMQ_RABBITMQ_URL to use RabbitMQ:
//
//	go run ./examples/outbox
//	ACEMQ_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable go run ./examples/outbox
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/outbox"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

// OrderPlaced is what the tour publishes.
type OrderPlaced struct {
	OrderID string `json:"orderId"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
}

// openDB opens PostgreSQL when ACEMQ_POSTGRES_URL is set, else SQLite in a
// temporary directory with a busy timeout and one connection, as SQLite
// with database/sql wants.
func openDB() (*sql.DB, outbox.Dialect, func(), error) {
	if url := os.Getenv("ACEMQ_POSTGRES_URL"); url != "" {
		db, err := sql.Open("pgx", url)
		if err != nil {
			return nil, 0, nil, err
		}
		fmt.Println("database: PostgreSQL")
		return db, outbox.Postgres, func() { _ = db.Close() }, nil
	}
	dir, err := os.MkdirTemp("", "acemq-outbox")
	if err != nil {
		return nil, 0, nil, err
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, 0, nil, err
	}
	db.SetMaxOpenConns(1)
	fmt.Println("database: SQLite in a temporary directory")
	return db, outbox.SQLite, func() { _ = db.Close(); _ = os.RemoveAll(dir) }, nil
}

func run(ctx context.Context) (err error) {
	db, dialect, closeDB, err := openDB()
	if err != nil {
		return err
	}
	defer closeDB()
	brokerURL := "memory://outbox-example"
	if url := os.Getenv("ACEMQ_RABBITMQ_URL"); url != "" {
		brokerURL = url
	}
	stampTenant := func(_ context.Context, pc *acemq.PublishContext) error {
		pc.SetHeader("x-tenant", "acme")
		return nil
	}
	mq, err := acemq.Connect(ctx, brokerURL, acemq.WithPublishInterceptor(stampTenant))
	if err != nil {
		return err
	}
	defer mq.Close()
	fmt.Println("broker:", acemq.Redact(brokerURL))

	suffix := randomSuffix()
	ob, err := outbox.New(db, dialect, outbox.Table("outbox_example_"+suffix))
	if err != nil {
		return err
	}
	defer ob.Close()
	if err := ob.Migrate(ctx); err != nil {
		return err
	}
	defer func() { _ = ob.Drop(context.WithoutCancel(ctx)) }()

	queue := "outbox-example-" + suffix
	received := make(chan string, 8)
	consumer, err := acemq.NewConsumer(mq, queue, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		received <- fmt.Sprintf("%s (tenant %v)", m.Payload.OrderID, m.Envelope.Headers["x-tenant"])
		return acemq.Done()
	})
	if err != nil {
		return err
	}
	// The queues NewConsumer declared: on RabbitMQ they would outlive the tour.
	defer func() { err = errors.Join(err, mq.Delete(context.WithoutCancel(ctx), consumer.Topology()...)) }()

	orders := outbox.NewPublisher[OrderPlaced](ob, mq, "", queue)
	writes := []struct {
		id     string
		commit bool
		opts   []acemq.SendOption
		note   string
	}{
		{id: "A-1", commit: true, note: "committed"},
		{id: "A-2", commit: false, note: "rolled back"},
		{id: "A-3", commit: true, opts: []acemq.SendOption{outbox.After(500 * time.Millisecond)}, note: "committed, due in 500ms"},
	}
	for _, w := range writes {
		if err := writeOrder(ctx, db, orders, w.id, w.commit, w.opts); err != nil {
			return err
		}
		fmt.Printf("wrote %s: %s\n", w.id, w.note)
	}
	pending, err := ob.Pending(ctx)
	if err != nil {
		return err
	}
	fmt.Println("rows waiting in the outbox:", pending)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- consumer.Run(runCtx) }()
	go func() { done <- outbox.NewRelay(ob, mq, outbox.PollInterval(50*time.Millisecond)).Run(runCtx) }()
	start := time.Now()
	for range 2 {
		select {
		case got := <-received:
			fmt.Printf("received %s after %s\n", got, time.Since(start).Round(100*time.Millisecond))
		case <-ctx.Done():
			stop()
			return fmt.Errorf("waiting for the relay: %w", ctx.Err())
		}
	}
	stop()
	for range 2 {
		if err := <-done; err != nil {
			return err
		}
	}
	fmt.Println("A-2 was never published: its transaction rolled back")
	return nil
}

// writeOrder writes an order's message in a transaction of its own, where
// a real service would also write the order's rows.
func writeOrder(ctx context.Context, db *sql.DB, orders *outbox.Publisher[OrderPlaced], id string, commit bool, opts []acemq.SendOption) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := orders.Send(ctx, tx, OrderPlaced{OrderID: id}, opts...); err != nil {
		_ = tx.Rollback()
		return err
	}
	if !commit {
		return tx.Rollback()
	}
	return tx.Commit()
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Command batch writes orders to SQLite in batches: a batch consumer on the
// in-process broker hands its handler up to 50 orders at once, and the
// handler inserts each batch with one statement in one transaction. Two of
// the orders are bad; each goes to the dead-letter queue alone, and the
// rest of its batch is written. Run it with
//
//	go run ./examples/batch
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/acemq/acemq"
	_ "modernc.org/sqlite"
)

// OrderPlaced is what the shop publishes.
type OrderPlaced struct {
	OrderID    string `json:"orderId"`
	TotalCents int64  `json:"totalCents"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "batch:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "acemq-batch")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "orders.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one writer, as SQLite wants
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (
		message_id  TEXT PRIMARY KEY,
		order_id    TEXT NOT NULL,
		total_cents INTEGER NOT NULL)`); err != nil {
		return err
	}

	const total = 230
	settled := make(chan acemq.Settlement, total)
	mq, err := acemq.Connect(ctx, "memory://batch",
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		return err
	}
	defer mq.Close()

	var mu sync.Mutex
	var sizes []int
	write := func(ctx context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
		mu.Lock()
		sizes = append(sizes, len(batch))
		mu.Unlock()
		acks := make([]acemq.Ack, len(batch))
		var good []*acemq.Message[OrderPlaced]
		for i, m := range batch {
			if m.Payload.TotalCents < 0 {
				acks[i] = acemq.Reject(fmt.Errorf("order %s has a negative total", m.Payload.OrderID))
				continue
			}
			acks[i] = acemq.Done()
			good = append(good, m)
		}
		if err := insert(ctx, db, good); err != nil {
			for i := range acks {
				if acks[i].Kind() == acemq.AckDone {
					acks[i] = acemq.Retry(err) // the batch is written again, later
				}
			}
		}
		return acks
	}
	orders, err := acemq.NewBatchConsumer(mq, "orders", write,
		acemq.BatchSize(50), acemq.BatchWait(100*time.Millisecond))
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- orders.Run(runCtx) }()
	// finish stops the consumer and waits for Run: on every return, so no
	// batch is still being written when the database closes.
	finish := sync.OnceValue(func() error {
		stop()
		return <-done
	})
	defer finish()

	batch := make([]OrderPlaced, total)
	for i := range batch {
		batch[i] = OrderPlaced{OrderID: fmt.Sprintf("A-%03d", i+1), TotalCents: int64(100 + i)}
	}
	batch[41].TotalCents, batch[170].TotalCents = -1, -250
	for _, r := range acemq.NewPublisher[OrderPlaced](mq, "", "orders").SendAll(ctx, batch) {
		if r.Err != nil {
			return r.Err
		}
	}

	outcomes := map[acemq.Outcome]int{}
	for range total {
		select {
		case s := <-settled:
			outcomes[s.Outcome]++
			if s.Outcome != acemq.OutcomeAcked {
				fmt.Printf("%s: %s\n", s.Outcome, s.Reason)
			}
		case <-ctx.Done():
			return errors.New("not every order settled in time")
		}
	}
	if err := finish(); err != nil {
		return err
	}

	var rows int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&rows); err != nil {
		return err
	}
	mu.Lock()
	fmt.Printf("batches handed to the handler: %d, sizes %v\n", len(sizes), sizes)
	mu.Unlock()
	fmt.Printf("acked %d, rejected %d; rows in SQLite: %d\n", outcomes[acemq.OutcomeAcked], outcomes[acemq.OutcomeRejected], rows)
	return nil
}

// insert writes the orders in one statement, in one transaction. A
// redelivered order is written once: its message ID is the key.
func insert(ctx context.Context, db *sql.DB, batch []*acemq.Message[OrderPlaced]) error {
	if len(batch) == 0 {
		return nil
	}
	var sb strings.Builder
	sb.WriteString("INSERT INTO orders (message_id, order_id, total_cents) VALUES ")
	args := make([]any, 0, 3*len(batch))
	for i, m := range batch {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?, ?)")
		args = append(args, m.Envelope.ID, m.Payload.OrderID, m.Payload.TotalCents)
	}
	sb.WriteString(" ON CONFLICT (message_id) DO NOTHING")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, sb.String(), args...); err != nil {
		return err
	}
	return tx.Commit()
}

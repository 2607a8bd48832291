package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/outbox"
)

// ExampleOutbox_Replay dead-letters a row whose queue does not exist yet,
// after MaxAttempts failed publishes, then replays it once the queue is
// there.
func ExampleOutbox_Replay() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, cleanup, err := openExampleDB()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cleanup()
	mq, err := acemq.Connect(ctx, "memory://outbox-dead-example")
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

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := outbox.NewPublisher[OrderPlaced](ob, mq, "", "invoices").Send(ctx, tx, OrderPlaced{OrderID: "A-1"}); err != nil {
		fmt.Println(err)
		return
	}
	if err := tx.Commit(); err != nil {
		fmt.Println(err)
		return
	}

	// No queue "invoices" yet: every publish fails, and the third
	// failure dead-letters the row.
	relay := func(ctx context.Context) (stop func() error) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- outbox.NewRelay(ob, mq, outbox.MaxAttempts(3), outbox.Backoff(10*time.Millisecond, 10*time.Millisecond),
				outbox.PollInterval(10*time.Millisecond), outbox.WithLogger(slog.New(slog.DiscardHandler))).Run(ctx)
		}()
		return func() error { cancel(); return <-done }
	}
	stop := relay(ctx)
	for n := int64(0); n == 0 && ctx.Err() == nil; time.Sleep(10 * time.Millisecond) {
		if n, err = ob.Dead(ctx); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := stop(); err != nil {
		fmt.Println(err)
		return
	}
	dead, err := ob.DeadRows(ctx, 10)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range dead {
		fmt.Printf("dead: to %q after %d attempts\n", d.RoutingKey, d.Attempts)
	}

	// The cause fixed, the row goes out.
	if err := mq.Declare(ctx, acemq.Queue{Name: "invoices"}); err != nil {
		fmt.Println(err)
		return
	}
	n, err := ob.Replay(ctx, dead[0].ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("replayed:", n)
	stop = relay(ctx)
	for n := int64(1); n > 0 && ctx.Err() == nil; time.Sleep(10 * time.Millisecond) {
		if n, err = ob.Pending(ctx); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := stop(); err != nil {
		fmt.Println(err)
		return
	}
	pending, err := ob.Pending(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("pending after the replay:", pending)
	// Output:
	// dead: to "invoices" after 3 attempts
	// replayed: 1
	// pending after the replay: 0
}

package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"reflect"
	"sync"
	"time"

	"github.com/acemq/acemq"
)

// The recipes of docs/consuming.md, each as the page shows it, in a
// function that returns its error; Example_consuming runs them on
// memory://, one broker each.

// consumeShop is the page's first consumer: eight workers on "orders",
// bound to the exchange "shop", until ctx ends.
func consumeShop(ctx context.Context, mq *acemq.Conn, handle acemq.Handler[OrderPlaced]) error {
	orders, err := acemq.NewConsumer(mq, "orders", handle,
		acemq.Concurrency(8), acemq.Bind("shop", "order.*"))
	if err != nil {
		return err
	}
	err = orders.Run(ctx) // blocks until ctx ends
	return err
}

// declareThenSend gives NewConsumer's declarations the caller's ctx: once
// it returns, a publish to the queue is routable. It then runs the
// consumer until ctx ends.
func declareThenSend(ctx context.Context, mq *acemq.Conn, handle acemq.Handler[OrderPlaced], order OrderPlaced) error {
	cons, err := acemq.NewConsumer(mq, "orders", handle, acemq.DeclareContext(ctx))
	if err != nil {
		return err // ctx ended, or the broker refused a declaration
	}
	err = acemq.NewPublisher[OrderPlaced](mq, "", "orders").Send(ctx, order) // routable
	if err != nil {
		return err
	}
	return cons.Run(ctx)
}

// acceptOldNames is a consumer that takes the type's old names too.
func acceptOldNames(mq *acemq.Conn, handle acemq.Handler[OrderPlaced]) (*acemq.Consumer[OrderPlaced], error) {
	orders, err := acemq.NewConsumer(mq, "orders", handle, acemq.AcceptTypes("order.placed", "OrderCreated"))
	return orders, err
}

// routeBilling is the page's Router: one queue, two types.
func routeBilling(ctx context.Context, mq *acemq.Conn, chargeOrder acemq.Handler[OrderPlaced], issueRefund acemq.Handler[RefundIssued]) error {
	billing := acemq.NewRouter(mq, "billing", acemq.Concurrency(4))
	acemq.Route(billing, chargeOrder)                           // Handler[OrderPlaced]: type "OrderPlaced"
	acemq.Route(billing, issueRefund, acemq.TypeName("Refund")) // Handler[RefundIssued]: type "Refund"
	err := billing.Run(ctx)
	return err
}

// orderTable stands for the database a batch consumer writes to.
type orderTable struct {
	mu   sync.Mutex
	rows []string
	down bool
}

// insertAll writes a batch in one statement: all of it, or none.
func insertAll(_ context.Context, db *orderTable, batch []*acemq.Message[OrderPlaced]) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.down {
		return errors.New("the database is down")
	}
	for _, m := range batch {
		db.rows = append(db.rows, m.Payload.OrderID)
	}
	return nil
}

// writeBatches is the page's batch consumer: one INSERT per batch.
func writeBatches(mq *acemq.Conn, db *orderTable) (*acemq.Consumer[OrderPlaced], error) {
	write := func(ctx context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
		if err := insertAll(ctx, db, batch); err != nil { // one statement for the batch
			acks := make([]acemq.Ack, len(batch))
			for i := range acks {
				acks[i] = acemq.AckOf(err) // each message retried (dead-lettered if Fatal)
			}
			return acks
		}
		return nil // all Done
	}
	orders, err := acemq.NewBatchConsumer(mq, "orders", write,
		acemq.BatchSize(100), acemq.BatchWait(100*time.Millisecond))
	return orders, err
}

// killSwitchDefaults is a consumer with the kill switch set to its
// defaults, spelled out.
func killSwitchDefaults(mq *acemq.Conn, handle acemq.Handler[OrderPlaced]) (*acemq.Consumer[OrderPlaced], error) {
	orders, err := acemq.NewConsumer(mq, "orders", handle,
		acemq.KillSwitch(acemq.KillSwitchPolicy{
			Window:      30 * time.Second, // the failure share is measured over this
			MinFailures: 10,               // no trip below this many failures in the window
			Threshold:   0.5,              // the share of failed deliveries that trips it
			CoolDown:    30 * time.Second, // before the first probe
		}))
	return orders, err
}

// The recipes of docs/consuming.md at work: a bound consumer, declarations
// bounded by the caller's ctx, old type names, a Router, a batch consumer
// and a kill switch.
func Example_consuming() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	connect := func(name string) *acemq.Conn {
		mq, err := acemq.Connect(ctx, "memory://consuming-"+name)
		if err != nil {
			log.Fatal(err)
		}
		return mq
	}
	// handle reports each delivery; wait prints the next n.
	handled := make(chan string, 16)
	handle := func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		handled <- m.Envelope.Type + " " + m.Payload.OrderID
		return acemq.Done()
	}
	wait := func(n int) {
		for range n {
			fmt.Println("  handled", <-handled)
		}
	}

	mq := connect("shop")
	if err := mq.Declare(ctx, acemq.Exchange{Name: "shop", Kind: "topic"}); err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- consumeShop(runCtx, mq, handle) }()
	for len(mq.HealthReport(ctx).Consumers) == 0 { // NewConsumer declared and bound the queue
		time.Sleep(time.Millisecond)
	}
	if err := acemq.NewPublisher[OrderPlaced](mq, "shop", "order.placed").Send(ctx, OrderPlaced{OrderID: "A-1"}); err != nil {
		log.Fatal(err)
	}
	wait(1)
	stop()
	fmt.Println("bound to shop; Run returned", <-ran)

	mq = connect("declare")
	runCtx, stop = context.WithCancel(ctx)
	go func() { ran <- declareThenSend(runCtx, mq, handle, OrderPlaced{OrderID: "A-2"}) }()
	wait(1)
	stop()
	fmt.Println("declared before the send; Run returned", <-ran)

	mq = connect("accept")
	cons, err := acceptOldNames(mq, handle)
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"order.placed", "OrderCreated"} {
		if err := acemq.NewPublisher[OrderPlaced](mq, "", "orders", acemq.TypeName(name)).Send(ctx, OrderPlaced{OrderID: "A-3"}); err != nil {
			log.Fatal(err)
		}
	}
	runExample(ctx, cons, func() { wait(2) })

	mq = connect("billing")
	runCtx, stop = context.WithCancel(ctx)
	go func() {
		ran <- routeBilling(runCtx, mq, handle, func(_ context.Context, m *acemq.Message[RefundIssued]) acemq.Ack {
			handled <- m.Envelope.Type + " " + m.Payload.OrderID
			return acemq.Done()
		})
	}()
	for len(mq.HealthReport(ctx).Consumers) == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := acemq.NewPublisher[RefundIssued](mq, "", "billing", acemq.TypeName("Refund")).Send(ctx, RefundIssued{OrderID: "A-4"}); err != nil {
		log.Fatal(err)
	}
	wait(1)
	stop()
	fmt.Println("routed; Run returned", <-ran)

	mq = connect("batch")
	db := &orderTable{}
	batches, err := writeBatches(mq, db)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range acemq.NewPublisher[OrderPlaced](mq, "", "orders").SendAll(ctx, []OrderPlaced{{OrderID: "A-5"}, {OrderID: "A-6"}}) {
		if r.Err != nil {
			log.Fatal(r.Err)
		}
	}
	runExample(ctx, batches, func() {
		for {
			db.mu.Lock()
			n := len(db.rows)
			db.mu.Unlock()
			if n == 2 {
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	fmt.Println("rows written in batches:", db.rows)

	mq = connect("killswitch")
	if _, err := killSwitchDefaults(mq, handle); err != nil {
		log.Fatal(err)
	}
	fmt.Println("kill switch with its defaults: made")
	// Output:
	//   handled OrderPlaced A-1
	// bound to shop; Run returned <nil>
	//   handled OrderPlaced A-2
	// declared before the send; Run returned <nil>
	//   handled order.placed A-3
	//   handled OrderCreated A-3
	//   handled Refund A-4
	// routed; Run returned <nil>
	// rows written in batches: [A-5 A-6]
	// kill switch with its defaults: made
}

// runExample runs cons until until returns, then stops it.
func runExample[T any](ctx context.Context, cons *acemq.Consumer[T], until func()) {
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(runCtx) }()
	until()
	stop()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
}

// The retry policy docs/consuming.md spells out is the default.
func ExampleDefaultRetryPolicy() {
	policy := acemq.RetryPolicy{
		MaxAttempts: 5,                                                                                // deliveries in total
		Delays:      []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute}, // the last repeats
	}
	fmt.Println(reflect.DeepEqual(policy, acemq.DefaultRetryPolicy()))
	// Output: true
}

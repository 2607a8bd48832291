package patterns_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/otel"
	"github.com/acemq/acemq/patterns"
)

// The code of docs/patterns.md, as the page shows it, in functions;
// Example_page runs them.

// guardedHandler is handle traced, bounded in time and run once per ID.
func guardedHandler(handle acemq.Handler[OrderPlaced], tracing *otel.Tracing, store patterns.IdempotencyStore) acemq.Handler[OrderPlaced] {
	handler := patterns.Chain(handle,
		otel.Middleware[OrderPlaced](tracing, "orders"),
		patterns.WithTimeout[OrderPlaced](10*time.Second),
		patterns.WithIdempotency[OrderPlaced](store))
	return handler
}

// chargeOnce runs charge once per message ID, within 10 seconds.
func chargeOnce(charge acemq.Handler[OrderPlaced]) acemq.Handler[OrderPlaced] {
	handler := patterns.Chain(charge,
		patterns.WithTimeout[OrderPlaced](10*time.Second),
		patterns.WithIdempotency[OrderPlaced](patterns.NewMemoryStore()))
	return handler
}

// askPrice asks the pricing service for an order's price and waits.
func askPrice(ctx context.Context, mq *acemq.Conn, order OrderPlaced) (Quote, error) {
	quote, err := patterns.Request[OrderPlaced, Quote](ctx, mq, "", "pricing", order)
	return quote, err
}

// price is what the pricing service charges.
func price(o OrderPlaced) Quote { return Quote{OrderID: o.OrderID, Cents: o.TotalCents * 2} }

// pricing is the pricing service's handler: it answers every request.
func pricing(mq *acemq.Conn) acemq.Handler[OrderPlaced] {
	return func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		return acemq.AckOf(patterns.Reply(ctx, mq, m.Envelope, price(m.Payload)))
	}
}

// Posting is one row of the ledger.
type Posting struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// postings stands for the ledger's database: a batch goes in whole, or
// not at all when a row breaks its check constraint.
type postings struct {
	mu   sync.Mutex
	rows []Posting
}

func (l *postings) InsertPostings(_ context.Context, batch []*acemq.Message[Posting]) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range batch {
		if m.Payload.Cents == 0 {
			return acemq.Fatal(fmt.Errorf("posting to %s: a zero amount violates check constraint", m.Payload.Account))
		}
	}
	for _, m := range batch {
		l.rows = append(l.rows, m.Payload)
	}
	return nil
}

// bisectLedger writes postings a batch at a time, and finds the bad row of
// a batch the ledger refuses.
func bisectLedger(mq *acemq.Conn, ledger *postings) (*acemq.Consumer[Posting], error) {
	insertAll := func(ctx context.Context, batch []*acemq.Message[Posting]) error {
		return ledger.InsertPostings(ctx, batch) // one statement; all or nothing
	}
	cons, err := acemq.NewBatchConsumer(mq, "ledger", patterns.Bisect(insertAll), acemq.BatchSize(2000))
	return cons, err
}

// sendTrip sends trip to validate, then price, then ship.
func sendTrip(ctx context.Context, mq *acemq.Conn, trip Trip) error {
	err := acemq.NewPublisher[Trip](mq, "", "validate").
		Send(ctx, trip, patterns.Itinerary("price", "ship"))
	return err
}

// tripStep is a step of the slip: validate, then on to the next step.
func tripStep(mq *acemq.Conn, validate acemq.Handler[Trip]) acemq.Handler[Trip] {
	handler := patterns.Chain(validate, patterns.Forward[Trip](mq))
	return handler
}

// The code of docs/patterns.md at work: middleware, a request and its
// reply, a bisected batch and a routing slip.
func Example_page() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	charges := 0
	charge := func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		charges++
		return acemq.Done()
	}
	m := &acemq.Message[OrderPlaced]{Envelope: &acemq.Envelope{ID: "m-1", Attempt: 1}}
	for _, h := range []acemq.Handler[OrderPlaced]{chargeOnce(charge), guardedHandler(charge, otel.New(), patterns.NewMemoryStore())} {
		for range 2 { // the same message twice
			if ack := h(ctx, m); ack.Kind() != acemq.AckDone {
				fmt.Println(ack.Kind(), ack.Err())
			}
		}
	}
	fmt.Println("charged once per handler:", charges)

	mq, err := acemq.Connect(ctx, "memory://patterns-page")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mq.Close()
	pricer, err := acemq.NewConsumer(mq, "pricing", pricing(mq))
	if err != nil {
		fmt.Println(err)
		return
	}
	stop := consumeFor(pricer)
	defer stop()
	quote, err := askPrice(ctx, mq, OrderPlaced{OrderID: "A-1", TotalCents: 1250})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s costs %d cents\n", quote.OrderID, quote.Cents)

	ledger := &postings{}
	cons, err := bisectLedger(mq, ledger)
	if err != nil {
		fmt.Println(err)
		return
	}
	batch := []Posting{{"cash", 100}, {"fees", 0}, {"cash", -100}}
	for _, r := range acemq.NewPublisher[Posting](mq, "", "ledger").SendAll(ctx, batch) {
		if r.Err != nil {
			fmt.Println(r.Err)
			return
		}
	}
	stopLedger := consumeFor(cons)
	for {
		ledger.mu.Lock()
		n := len(ledger.rows)
		ledger.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	stopLedger()
	fmt.Println("postings written:", ledger.rows)

	arrived := make(chan Trip, 1)
	for _, name := range []string{"validate", "price", "ship"} {
		step, err := acemq.NewConsumer(mq, name, tripStep(mq, func(_ context.Context, m *acemq.Message[Trip]) acemq.Ack {
			m.Payload.Visited = append(m.Payload.Visited, name)
			if len(patterns.Steps(m.Envelope)) == 0 {
				arrived <- m.Payload
			}
			return acemq.Done()
		}))
		if err != nil {
			fmt.Println(err)
			return
		}
		stop := consumeFor(step)
		defer stop()
	}
	if err := sendTrip(ctx, mq, Trip{}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("the trip went through", (<-arrived).Visited)
	// Output:
	// charged once per handler: 2
	// A-1 costs 2500 cents
	// postings written: [{cash 100} {cash -100}]
	// the trip went through [validate price ship]
}

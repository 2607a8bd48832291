package blob_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
)

// ReportReady is the metadata that travels with a large report.
type ReportReady struct {
	Quarter string `json:"quarter"`
}

// A large payload sent and handled as a stream: Send stores the bytes and
// publishes a small message naming them; the handler reads them through a
// Reader, whose io.EOF says the size and SHA-256 matched.
func ExamplePublisher() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := acemq.Connect(ctx, "memory://example-payload")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s := blob.Memory()

	handled := make(chan string, 1)
	consumer, err := acemq.NewConsumer(c, "reports", blob.Handle(s,
		func(ctx context.Context, m *acemq.Message[ReportReady], body *blob.Reader) acemq.Ack {
			h := sha256.New()
			n, err := io.Copy(h, body) // io.Copy stops at io.EOF: the digest matched
			if err != nil {
				return acemq.Retry(err) // a store that failed; a corrupt object goes to .dlq
			}
			handled <- fmt.Sprintf("%s: %d bytes, SHA-256 %x...", m.Payload.Quarter, n, h.Sum(nil)[:4])
			return acemq.Done()
		}, blob.DeleteOnDone()))
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = consumer.Run(ctx) }()

	p := blob.NewPublisher[ReportReady](c, s, "", "reports")
	ref, err := p.Send(ctx, ReportReady{Quarter: "2026-Q4"}, strings.NewReader(strings.Repeat("row\n", 1<<20)))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stored %d bytes as one object\n", ref.Size)
	fmt.Println(<-handled)
	// Output:
	// stored 4194304 bytes as one object
	// 2026-Q4: 4194304 bytes, SHA-256 325e746a...
}

// Order is a typed message that is sometimes very large.
type Order struct {
	ID    string   `json:"id"`
	Lines []string `json:"lines"`
}

// With a claim check, an ordinary Publisher[T] whose encoded body is over
// the threshold stores the body and sends its Ref; a consumer on a Conn
// with the option loads it back before the decode.
func ExampleWithClaimCheck() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := blob.Memory()
	c, err := acemq.Connect(ctx, "memory://example-claim-check", blob.WithClaimCheck(s, 64<<10))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	got := make(chan Order, 1)
	consumer, err := acemq.NewConsumer(c, "orders", func(_ context.Context, m *acemq.Message[Order]) acemq.Ack {
		got <- m.Payload
		return acemq.Done()
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = consumer.Run(ctx) }()

	big := Order{ID: "A-1", Lines: make([]string, 50000)}
	if err := acemq.NewPublisher[Order](c, "", "orders").Send(ctx, big); err != nil {
		log.Fatal(err)
	}
	o := <-got
	fmt.Printf("order %s with %d lines, its body kept in the store\n", o.ID, len(o.Lines))
	// Output:
	// order A-1 with 50000 lines, its body kept in the store
}

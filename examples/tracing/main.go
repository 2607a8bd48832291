// Command tracing traces one order from its publish to its handler on the
// in-process broker and prints the two spans, one trace, with
// OpenTelemetry's stdout exporter. Run it with
//
//	go run ./examples/tracing
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/otel"
	"github.com/acemq/acemq/patterns"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// OrderPlaced is the message the example sends.
type OrderPlaced struct {
	OrderID    string `json:"orderId"`
	TotalCents int64  `json:"totalCents"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "tracing:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) (err error) {
	exporter, err := stdouttrace.New(stdouttrace.WithPrettyPrint())
	if err != nil {
		return err
	}
	// A syncer exports each span as it ends, so nothing waits for a batch.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer func() { err = errors.Join(err, tp.Shutdown(context.WithoutCancel(ctx))) }()
	tracing := otel.New(otel.WithTracerProvider(tp))

	settled := make(chan acemq.Settlement, 1)
	mq, err := acemq.Connect(ctx, "memory://tracing",
		acemq.WithPublishInterceptor(tracing.PublishInterceptor()),
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, mq.Shutdown(context.WithoutCancel(ctx))) }()

	handler := patterns.Chain(func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		fmt.Printf("handling order %s (%d cents)\n", m.Payload.OrderID, m.Payload.TotalCents)
		return acemq.Done()
	},
		otel.Middleware[OrderPlaced](tracing, "orders"),
		patterns.WithTimeout[OrderPlaced](5*time.Second))
	orders, err := acemq.NewConsumer(mq, "orders", handler)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- orders.Run(runCtx) }()
	defer func() { stop(); err = errors.Join(err, <-done) }()

	pub := otel.NewPublisher[OrderPlaced](tracing, mq, "", "orders")
	if err := pub.Send(ctx, OrderPlaced{OrderID: "A-1", TotalCents: 1250}); err != nil {
		return err
	}
	select {
	case s := <-settled:
		fmt.Printf("order %s settled: %s\n", s.Envelope.ID, s.Outcome)
	case <-ctx.Done():
		return fmt.Errorf("the order was not handled: %w", ctx.Err())
	}
	return nil
}

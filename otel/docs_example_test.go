package otel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/otel"
	"github.com/acemq/acemq/patterns"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The code of docs/observability.md, as the page shows it, in functions
// that return their error; Example_observability runs them.

// connectMetered is a Conn whose instruments are mp's.
func connectMetered(ctx context.Context, url string, mp metric.MeterProvider) (*acemq.Conn, error) {
	mq, err := acemq.Connect(ctx, url, acemq.WithMeterProvider(mp))
	return mq, err
}

// tracedService traces what it publishes to "orders" and what handle
// does with it: it sends order and handles it, then returns.
func tracedService(ctx context.Context, url string, handle acemq.Handler[OrderPlaced], order OrderPlaced) error {
	tracing := otel.New() // the global tracer provider and propagator
	mq, err := acemq.Connect(ctx, url,
		acemq.WithPublishInterceptor(tracing.PublishInterceptor()))
	if err != nil {
		return err
	}
	defer mq.Close()
	orders := otel.NewPublisher[OrderPlaced](tracing, mq, "", "orders")
	handler := patterns.Chain(handle, otel.Middleware[OrderPlaced](tracing, "orders"))

	cons, err := acemq.NewConsumer(mq, "orders", handler)
	if err != nil {
		return err
	}
	if err := orders.Send(ctx, order); err != nil {
		return err
	}
	return cons.Run(ctx)
}

// tracedBatches is a batch consumer traced batch by batch and message by
// message, run until ctx ends.
func tracedBatches(ctx context.Context, mq *acemq.Conn, tracing *otel.Tracing, writeBatch acemq.BatchHandler[OrderPlaced]) error {
	cons, err := acemq.NewBatchConsumer(mq, "orders", otel.HandleBatch(tracing, "orders", writeBatch))
	if err != nil {
		return err
	}
	return cons.Run(ctx)
}

// The metrics, the traced service and the traced batch consumer of
// docs/observability.md, each on a memory broker of its own.
func Example_observability() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	mq, err := connectMetered(ctx, "memory://observability-metrics", mp)
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	if err := mq.Declare(ctx, acemq.Queue{Name: "orders"}); err != nil {
		fmt.Println("declare:", err)
		return
	}
	if err := acemq.NewPublisher[OrderPlaced](mq, "", "orders").Send(ctx, OrderPlaced{OrderID: "A-1"}); err != nil {
		fmt.Println("send:", err)
		return
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		fmt.Println("collect:", err)
		return
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "acemq.publish.total" {
				fmt.Println(sm.Scope.Name, m.Name)
			}
		}
	}
	_ = mq.Close()
	_ = mp.Shutdown(ctx)

	runCtx, stop := context.WithCancel(ctx)
	handled := make(chan string, 1)
	ran := make(chan error, 1)
	go func() {
		ran <- tracedService(runCtx, "memory://observability-traces", func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			handled <- m.Payload.OrderID
			return acemq.Done()
		}, OrderPlaced{OrderID: "A-2"})
	}()
	fmt.Println("traced and handled:", <-handled)
	stop()
	fmt.Println("Run returned:", <-ran)

	mq, err = acemq.Connect(ctx, "memory://observability-batches")
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer mq.Close()
	runCtx, stop = context.WithCancel(ctx)
	go func() {
		ran <- tracedBatches(runCtx, mq, otel.New(), func(_ context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
			handled <- fmt.Sprint(len(batch), " message(s)")
			return nil
		})
	}()
	for len(mq.HealthReport(ctx).Consumers) == 0 { // NewBatchConsumer declared the queue
		time.Sleep(time.Millisecond)
	}
	if err := acemq.NewPublisher[OrderPlaced](mq, "", "orders").Send(ctx, OrderPlaced{OrderID: "A-3"}); err != nil {
		fmt.Println("send:", err)
		stop()
		<-ran
		return
	}
	fmt.Println("a traced batch of", <-handled)
	stop()
	fmt.Println("Run returned:", <-ran)
	// Output:
	// github.com/acemq/acemq acemq.publish.total
	// traced and handled: A-2
	// Run returned: <nil>
	// a traced batch of 1 message(s)
	// Run returned: <nil>
}

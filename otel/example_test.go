package otel_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A traced publisher and a traced handler make one trace: the consumer span
// is the producer span's child, and it ends with the delivery's outcome.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(ctx) }()
	tracing := otel.New(otel.WithTracerProvider(tp))

	settled := make(chan acemq.Settlement, 1)
	mq, err := acemq.Connect(ctx, "memory://",
		acemq.WithPublishInterceptor(tracing.PublishInterceptor()),
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer mq.Close()

	handle := func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() }
	orders, err := acemq.NewConsumer(mq, "orders", otel.Handle(tracing, "orders", handle))
	if err != nil {
		fmt.Println("consumer:", err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- orders.Run(runCtx) }()
	defer func() { stop(); <-done }()

	pub := otel.NewPublisher[OrderPlaced](tracing, mq, "", "orders")
	if err := pub.Send(ctx, OrderPlaced{OrderID: "A-1"}); err != nil {
		fmt.Println("send:", err)
		return
	}
	<-settled

	// The handler may finish before Send has its confirm: pick the spans by
	// kind, not by the order they ended in.
	var producer, consumer sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		switch s.SpanKind() {
		case trace.SpanKindProducer:
			producer = s
		case trace.SpanKindConsumer:
			consumer = s
		}
	}
	fmt.Println(producer.Name(), producer.SpanKind())
	fmt.Println(consumer.Name(), consumer.SpanKind())
	fmt.Println("same trace:", consumer.SpanContext().TraceID() == producer.SpanContext().TraceID())
	fmt.Println("child of the publish:", consumer.Parent().SpanID() == producer.SpanContext().SpanID())
	for _, kv := range consumer.Attributes() {
		if kv.Key == "messaging.acemq.outcome" {
			fmt.Println("outcome:", kv.Value.AsString())
		}
	}
	// Output:
	// publish amq.default producer
	// process orders consumer
	// same trace: true
	// child of the publish: true
	// outcome: acked
}

// The engine's own instruments need no wrapper: give the Conn a meter
// provider (or set the global one) and every publish and delivery is
// counted and timed.
func Example_metrics() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() {
		if err := mp.Shutdown(ctx); err != nil {
			fmt.Println("shutdown:", err)
		}
	}()

	settled := make(chan acemq.Settlement, 1)
	mq, err := acemq.Connect(ctx, "memory://", acemq.WithMeterProvider(mp),
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer mq.Close()
	orders, err := acemq.NewConsumer(mq, "orders", func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		return acemq.Reject(errors.New("no such customer"))
	})
	if err != nil {
		fmt.Println("consumer:", err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- orders.Run(runCtx) }()
	defer func() { stop(); <-done }()

	if err := acemq.NewPublisher[OrderPlaced](mq, "", "orders").Send(ctx, OrderPlaced{OrderID: "A-1"}); err != nil {
		fmt.Println("send:", err)
		return
	}
	<-settled
	fmt.Println("healthy:", mq.Health(ctx) == nil)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		fmt.Println("collect:", err)
		return
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			lines = append(lines, fmt.Sprintf("%s (%s)", m.Name, m.Unit))
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// healthy: true
	// acemq.consume.duration (s)
	// acemq.consume.total ({message})
	// acemq.consumer.oldest_inflight (s)
	// acemq.consumer.paused ({consumer})
	// acemq.messages.dead.lettered.total ({message})
	// acemq.publish.duration (s)
	// acemq.publish.total ({message})
}

// Conn.Health answers a readiness probe: nil while the broker connection
// is up and every running consumer is consuming.
func Example_health() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mq, err := acemq.Connect(ctx, "memory://")
	if err != nil {
		fmt.Println("connect:", err)
		return
	}

	ready := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := mq.Health(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})

	probe := func() {
		rec := httptest.NewRecorder()
		ready.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	probe()
	if err := mq.Close(); err != nil {
		fmt.Println("close:", err)
	}
	probe()
	// Output:
	// 200 ok
	// 503 acemq: the connection is closed
}

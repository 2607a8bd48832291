package otelblob_test

import (
	"context"
	"fmt"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/otel"
	"github.com/acemq/acemq/otel/otelblob"
)

// A traced blob publisher: the store's Put runs inside the message's
// publish span.
func Example() {
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(ctx) }()
	tracing := otel.New(otel.WithTracerProvider(tp))

	mq, err := acemq.Connect(ctx, "memory://", acemq.WithPublishInterceptor(tracing.PublishInterceptor()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = mq.Close() }()
	if err := mq.Declare(ctx, acemq.Queue{Name: "reports"}); err != nil {
		fmt.Println(err)
		return
	}

	p := otelblob.NewPublisher[Report](tracing, mq, blob.Memory(), "", "reports")
	if _, err := p.Send(ctx, Report{Name: "q3"}, strings.NewReader("a large report")); err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range spans.Ended() {
		fmt.Println(s.Name())
	}
	// Output:
	// blob put
	// publish amq.default
}

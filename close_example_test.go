package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/acemq/acemq"
)

// A service that consumes one queue per tenant makes a consumer when a
// tenant arrives and closes it when the tenant leaves: Close stops its Run
// (the deliveries in hand settle first) and takes it off the Conn, so the
// health report and the gauges forget it, and Health does not count a
// consumer stopped on purpose as one that is not running.
func ExampleConsumer_Close() {
	ctx := context.Background()
	mq, err := acemq.Connect(ctx, "memory://example-close")
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()
	tenant, err := acemq.NewConsumer(mq, "orders.tenant-7", func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		return acemq.Done()
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tenant.Run(ctx) }()
	for mq.Health(ctx) != nil { // until it consumes
		time.Sleep(time.Millisecond)
	}
	fmt.Println("consumers:", len(mq.HealthReport(ctx).Consumers))

	// The tenant leaves.
	if err := tenant.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("Run returned:", <-done)
	fmt.Println("consumers:", len(mq.HealthReport(ctx).Consumers), "healthy:", mq.Health(ctx) == nil)
	err = tenant.Run(ctx)
	fmt.Println("closed:", errors.Is(err, acemq.ErrConsumerClosed))
	// Its queues stay on the broker until deleted.
	if err := mq.Delete(ctx, tenant.Topology()...); err != nil {
		log.Fatal(err)
	}
	// Output:
	// consumers: 1
	// Run returned: <nil>
	// consumers: 0 healthy: true
	// closed: true
}

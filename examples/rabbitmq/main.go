// Command rabbitmq runs the quickstart's tour on a real RabbitMQ broker:
// the queue "acemq-example-orders" with its .dlq, .parked and retry tiers.
// The broker is $ACEMQ_RABBITMQ_URL, or the local guest account:
//
//	go run ./examples/rabbitmq
//
// It empties its queues first, so each run starts clean, and leaves them
// afterwards for a look in the management UI.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/examples/internal/scenario"
)

const queue = "acemq-example-orders"

func main() {
	url := os.Getenv("ACEMQ_RABBITMQ_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, url); err != nil {
		fmt.Fprintln(os.Stderr, "rabbitmq example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string) error {
	fmt.Println("broker:", acemq.Redact(url))
	if err := reset(ctx, url); err != nil {
		return err
	}
	return scenario.Run(ctx, url, queue, os.Stdout)
}

// reset deletes what an earlier run left, so the tour's counts are its own:
// every queue a consumer of the tour's queue declares under its policy,
// listed by a consumer that declares nothing.
func reset(ctx context.Context, url string) error {
	mq, err := acemq.Connect(ctx, url, acemq.WithRetryPolicy(scenario.Policy))
	if err != nil {
		return err
	}
	defer mq.Close()
	tour, err := acemq.NewConsumer(mq, queue, func(context.Context, *acemq.Message[scenario.OrderPlaced]) acemq.Ack {
		return acemq.Done()
	}, acemq.NoDeclare())
	if err != nil {
		return err
	}
	if err := mq.Delete(ctx, tour.Topology()...); err != nil {
		return fmt.Errorf("emptying the tour's queues: %w", err)
	}
	return nil
}

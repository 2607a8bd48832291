//go:build unix

package acemq_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/acemq/acemq"
)

// Stopping on SIGTERM, as a service's main does (docs/operations.md,
// docs/getting-started.md): here the process sends itself the signal once
// its consumer runs, standing in for the orchestrator.
func ExampleConn_Shutdown_sigterm() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	mq, err := acemq.Connect(context.Background(), "memory://sigterm")
	if err != nil {
		log.Fatal(err)
	}
	orders, err := acemq.NewConsumer(mq, "orders", func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- orders.Run(context.Background()) }() // Shutdown, not a ctx, stops it
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		log.Fatal(err)
	}

	<-ctx.Done()
	drain, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := mq.Shutdown(drain); err != nil {
		log.Printf("shutdown: %v", err) // the drain ran out of time: Close did the rest
	}
	fmt.Println("Run:", <-ran)
	// Output:
	// Run: acemq: the connection is closed
}

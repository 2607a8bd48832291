// Command request-reply asks a pricing service for quotes and waits for
// each answer, with patterns.Request on one side and patterns.Reply in the
// other's handler. It runs on the in-process broker unless told otherwise:
//
//	go run ./examples/request-reply                  # memory://request-reply
//	go run ./examples/request-reply -url amqp://guest:guest@127.0.0.1:5672/
//
// ACEMQ_RABBITMQ_URL is used when -url is not given. On RabbitMQ the reply
// travels over direct reply-to, so no reply queue is declared; the pricing
// queue "acemq-example-pricing" and its .dlq, .parked and retry
// tiers are deleted on the way out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
)

// QuoteRequest asks what an order of Quantity items of SKU costs.
type QuoteRequest struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// Quote is the pricing service's answer.
type Quote struct {
	SKU        string `json:"sku"`
	TotalCents int64  `json:"totalCents"`
}

const queue = "acemq-example-pricing"

// prices is the pricing service's catalogue, in cents per item.
var prices = map[string]int64{"tea": 450, "mug": 1200}

func main() {
	// The environment is read after parsing, so -h never prints a password.
	url := flag.String("url", "", "the broker (default $ACEMQ_RABBITMQ_URL, else memory://request-reply)")
	flag.Parse()
	if *url == "" {
		*url = os.Getenv("ACEMQ_RABBITMQ_URL")
	}
	if *url == "" {
		*url = "memory://request-reply"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := run(ctx, *url, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "request-reply:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, out io.Writer) (err error) {
	fmt.Fprintln(out, "broker:", acemq.Redact(url))
	mq, err := acemq.Connect(ctx, url, acemq.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, mq.Shutdown(context.WithoutCancel(ctx))) }()

	// The pricing service: its handler answers each request with Reply,
	// passing its own ctx on so the reply's CausationID names the request.
	// An unknown SKU is rejected: the requester hears nothing and its
	// deadline decides how long it waits.
	pricing, err := acemq.NewConsumer(mq, queue, func(ctx context.Context, m *acemq.Message[QuoteRequest]) acemq.Ack {
		each, ok := prices[m.Payload.SKU]
		if !ok {
			return acemq.Reject(fmt.Errorf("no price for %q", m.Payload.SKU))
		}
		q := Quote{SKU: m.Payload.SKU, TotalCents: each * int64(m.Payload.Quantity)}
		return acemq.AckOf(patterns.Reply(ctx, mq, m.Envelope, q))
	})
	if err != nil {
		return err
	}
	// On RabbitMQ the queues the consumer declared would outlive the
	// example: delete them all, retry tiers included, once it has stopped.
	defer func() { err = errors.Join(err, mq.Delete(context.WithoutCancel(ctx), pricing.Topology()...)) }()
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- pricing.Run(runCtx) }()
	defer func() {
		stop()
		err = errors.Join(err, <-ran)
	}()

	// The caller: each request waits for its answer, up to its deadline.
	for _, req := range []QuoteRequest{{"tea", 3}, {"mug", 2}, {"cake", 1}} {
		reqCtx, cancel := context.WithTimeout(ctx, time.Second)
		start := time.Now()
		quote, err := patterns.Request[QuoteRequest, Quote](reqCtx, mq, "", queue, req)
		cancel()
		took := time.Since(start).Round(10 * time.Microsecond)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			fmt.Fprintf(out, "asked for %d × %s: no answer within 1s (the service rejected it)\n", req.Quantity, req.SKU)
		case err != nil:
			return err
		default:
			fmt.Fprintf(out, "asked for %d × %s: %d cents (answered in %v)\n", req.Quantity, req.SKU, quote.TotalCents, took)
		}
	}
	return nil
}

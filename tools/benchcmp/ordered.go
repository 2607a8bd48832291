package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
)

// acemqOrdered consumes e.n preloaded messages of keys keys (interleaved,
// as many per key) with an ordered consumer of partitions partitions and
// Concurrency(concurrency), from the moment Run starts until the last is
// handled; the spreader's first tick (a single instance takes every
// partition) is part of the time.
func acemqOrdered(partitions, concurrency, keys int) scenarioFunc {
	return func(e *env, q string) (measurement, error) {
		c, err := e.connect()
		if err != nil {
			return measurement{}, err
		}
		defer c.Close()
		defer deleteOrdered(c.Transport(), q, partitions)
		var handled atomic.Int64
		done := make(chan struct{})
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, _ *acemq.Message[payload]) acemq.Ack {
			if handled.Add(1) == int64(e.n) {
				close(done)
			}
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{Partitions: partitions}), acemq.Concurrency(concurrency))
		if err != nil {
			return measurement{}, err
		}
		if err := e.preloadKeyed(c, q, keys); err != nil {
			return measurement{}, err
		}
		for i := range partitions {
			if err := e.waitDepth(acemq.PartitionQueue(q, i), 1); err != nil {
				return measurement{}, err
			}
		}
		return e.consumeAll(cons, done, 5*time.Minute)
	}
}

// preloadKeyed publishes e.n messages to the exchange q, keyed round-robin
// over keys keys, as a Publisher with a key sends them.
func (e *env) preloadKeyed(c *acemq.Conn, q string, keys int) error {
	ms := make([]transport.Message, e.n)
	for i := range ms {
		ms[i] = transport.Message{
			Exchange: q, MessageID: fmt.Sprintf("%s-%d", q, i), Type: "payload", ContentType: "application/json",
			Headers: map[string]any{"x-acemq-key": fmt.Sprintf("key-%d", i%keys)}, Body: e.body,
		}
	}
	bp, ok := c.Transport().(transport.BatchPublisher)
	if !ok {
		return errors.New("the transport cannot publish batches")
	}
	for len(ms) > 0 {
		n := min(len(ms), 2000)
		for _, err := range bp.PublishBatch(context.Background(), ms[:n]) {
			if err != nil {
				return err
			}
		}
		ms = ms[n:]
	}
	return nil
}

// deleteOrdered deletes what an ordered consumer of q declared.
func deleteOrdered(t transport.Transport, q string, partitions int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{q + ".members", q + ".blocked", q + ".status"}
	for i := range partitions {
		names = append(names, acemq.PartitionQueue(q, i))
	}
	for _, n := range names {
		_ = t.DeleteQueue(ctx, n)
	}
	_ = t.DeleteExchange(ctx, q)
}

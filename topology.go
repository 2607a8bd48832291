package acemq

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/acemq/acemq/internal/ordering"
)

// Topology returns what the consumer declared in NewConsumer (or, with
// NoDeclare, expects to find): its queue, {queue}.dlq, {queue}.parked,
// one {queue}.retry.{delay} per tier of its retry policy, and the bindings
// Bind asked for. An Ordered consumer's is its exchange, partitions,
// .dlq, .parked, {queue}.members, {queue}.blocked and {queue}.status (see
// Ordered); what it makes beyond that, Conn.Delete finds from them: the
// fencing counter {queue}.fence, and the held and re-run queues of its
// blocked keys, one pair per key, made on demand. Its leases end with its
// connection. Conn.Delete given the whole list removes everything the
// consumer made; acemqtest.DeleteAfter does that when a test ends. The
// slice is the caller's, and Topology works after Close.
func (c *Consumer[T]) Topology() []Topology {
	if c == nil {
		return nil
	}
	return c.e.declared()
}

// Topology returns what the router declared in NewRouter, as
// Consumer.Topology does for a consumer; nothing for a Router NewRouter
// could not make (an invalid option: it declared nothing).
func (r *Router) Topology() []Topology {
	if r == nil {
		return nil
	}
	return r.e.declared()
}

// declared is a copy of the engine's topology, so that callers cannot
// change what the engine declares again.
func (e *engine) declared() []Topology {
	if e == nil {
		return nil
	}
	t := e.topology()
	for i, it := range t {
		switch v := it.(type) {
		case Queue:
			v.Args = maps.Clone(v.Args)
			t[i] = v
		case Exchange:
			v.Args = maps.Clone(v.Args)
			t[i] = v
		}
	}
	return t
}

// Delete deletes the queues and exchanges among t, with their messages
// and bindings: the inverse of Declare, for tests and tools that clean up
// what they declared (Consumer.Topology and Router.Topology list it). A
// Binding or ExchangeBinding is not deleted on its own; it goes with its
// queue or exchange. A queue or exchange that does not exist is not an
// error. An ordered queue's exchange (an x-consistent-hash exchange) takes
// with it what its consumers made on demand: the held and re-run queues of
// every key its registry ({queue}.blocked) has blocked, read before
// anything is deleted, and its fencing counter ({queue}.fence). Stop the
// consumers first (Close): a running one declares its queues again. Every
// item is tried; the error joins the failures. A transport that
// reconnects does not declare the deleted ones again.
func (c *Conn) Delete(ctx context.Context, t ...Topology) error {
	if c.closed.Load() {
		return ErrClosed
	}
	var errs []error
	// The blocked keys' queues first: the registries that name them are
	// among t.
	for _, it := range t {
		if x, ok := it.(Exchange); ok && x.Kind == "x-consistent-hash" {
			errs = append(errs, c.deleteKeyQueues(ctx, x.Name))
		}
	}
	for _, it := range t {
		switch v := it.(type) {
		case Queue:
			errs = append(errs, c.t.DeleteQueue(ctx, v.Name))
		case Exchange:
			errs = append(errs, c.t.DeleteExchange(ctx, v.Name))
			if v.Kind == "x-consistent-hash" {
				// An ordered queue's exchange: its fencing counter (a
				// stream on RabbitMQ, made by the first Fence) goes too.
				errs = append(errs, c.t.DeleteQueue(ctx, ordering.FenceCounter(v.Name)))
			}
		}
	}
	return errors.Join(errs...)
}

// deleteKeyQueues deletes the held and re-run queues of the keys the
// ordered queue's registry has blocked (see ordering.KeyQueues).
func (c *Conn) deleteKeyQueues(ctx context.Context, queue string) error {
	b := ordering.Broker{T: c.t, Leaser: c.caps.leaser, HandOver: c.caps.handOver, Log: c.cfg.logger}
	names, err := ordering.KeyQueues(ctx, b, &c.registryOps, queue)
	if err != nil {
		return fmt.Errorf("acemq: deleting the queues of the blocked keys of %q: %w", queue, err)
	}
	var errs []error
	for _, n := range names {
		if err := c.t.DeleteQueue(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("acemq: deleting %q, a queue of a blocked key of %q: %w", n, queue, err))
		}
	}
	return errors.Join(errs...)
}

// topology is what a plain (or batch) consumer declares: its queue,
// {queue}.dlq, {queue}.parked, one {queue}.retry.{delay} per tier and the
// bindings Bind asked for.
func (m plainMode) topology() []Topology {
	e := m.e
	main := Queue{Name: e.queue, Quorum: e.cfg.quorum}
	if e.cfg.quorum {
		main.Args = map[string]any{
			"x-delivery-limit":          int64(e.policy.MaxAttempts + 20),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": DeadLetterQueue(e.queue),
		}
	}
	t := []Topology{
		main,
		Queue{Name: DeadLetterQueue(e.queue), Quorum: e.cfg.quorum},
		Queue{Name: ParkingQueue(e.queue), Quorum: e.cfg.quorum},
	}
	for _, d := range e.tiers {
		tier := Queue{Name: RetryQueue(e.queue, d), Quorum: e.cfg.quorum, Args: map[string]any{
			"x-message-ttl":             d.Milliseconds(),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": e.queue,
		}}
		if e.cfg.quorum {
			// A message that expires in a tier moves back to the queue
			// with at-least-once dead-lettering: the tier keeps it until
			// the queue has taken it, even while a node is down. The
			// broker requires reject-publish overflow for that.
			tier.Args["x-dead-letter-strategy"] = "at-least-once"
			tier.Args["x-overflow"] = "reject-publish"
		}
		t = append(t, tier)
	}
	for _, b := range e.cfg.bindings {
		b.Queue = e.queue
		t = append(t, b)
	}
	return t
}

// ladder is every queue a plain consumer's delivery can be moved to, and
// the queue itself first.
func (m plainMode) ladder() []string {
	e := m.e
	names := []string{e.queue, DeadLetterQueue(e.queue), ParkingQueue(e.queue)}
	for _, d := range e.tiers {
		names = append(names, RetryQueue(e.queue, d))
	}
	return names
}

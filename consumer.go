package acemq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Handler handles one decoded delivery and says what should become of it.
type Handler[T any] func(ctx context.Context, m *Message[T]) Ack

// Middleware wraps a Handler; see patterns.Chain to compose several.
type Middleware[T any] func(next Handler[T]) Handler[T]

// Message is a delivery as a handler sees it.
type Message[T any] struct {
	Payload     T
	Envelope    *Envelope // never nil; its Headers are never nil
	Queue       string
	Redelivered bool // the broker delivered it before, unsettled

	fence uint64 // the fencing token of the partition's holder; 0 when none
	part  int    // the partition plus one; 0 when not ordered
}

// Fence returns the fencing token of the holder of the partition the
// delivery came from: a number the broker keeps (transport.Fencer), taken
// once when this instance became the partition's active consumer, and
// greater than every token of any earlier holder of any partition of the
// queue. Every delivery of a partition carries it, the messages a release
// of a blocked key runs included. A store refuses a stale holder's write
// by keeping the highest token that wrote a row and writing only with one
// at least as high, in the same statement (an upsert whose update has
// WHERE row.fence <= $token). Nothing written means a later holder wrote
// the row: roll back and return Retry with an error wrapping
// ErrPartitionLost, and the delivery goes back for the current holder.
// Fence is 0 when the consumer is not ordered or its transport has no
// Fencer: write without the check then. docs/ordering.md, Fencing, has
// the recipe as a test runs it.
func (m *Message[T]) Fence() uint64 { return m.fence }

// Partition returns the partition of an ordered queue the delivery came
// from, or -1 when the consumer is not ordered.
func (m *Message[T]) Partition() int { return m.part - 1 }

// Consumer takes deliveries from one queue and runs them through the
// consume interceptors, the codec and its handler on worker goroutines,
// then settles each one. It takes messages of T's type name (the one a
// Publisher[T] writes), the names AcceptTypes adds, and messages with no
// type; any other type is parked. A Consumer[Raw] takes every type.
type Consumer[T any] struct {
	e *engine
}

// NewConsumer returns a consumer of queue that hands T values to h. Unless
// NoDeclare is given it declares, before it returns, the durable queues
// {queue}, {queue}.dlq, {queue}.parked and one {queue}.retry.{delay} per
// delay of the retry policy, plus the bindings Bind asked for, so a publish
// right after it is routable. That is network I/O on RabbitMQ: give it
// your ctx with DeclareContext (without one it is bounded by 30 seconds),
// or declare yourself and pass NoDeclare. Start the consumer with Run.
// With Ordered it declares the ordered topology instead (see Ordered).
func NewConsumer[T any](c *Conn, queue string, h Handler[T], opts ...ConsumerOption) (*Consumer[T], error) {
	switch {
	case c == nil:
		return nil, errors.New("acemq: NewConsumer was given a nil Conn")
	case queue == "":
		return nil, errors.New("acemq: NewConsumer was given an empty queue name")
	case h == nil:
		return nil, fmt.Errorf("acemq: NewConsumer of %q was given a nil handler", queue)
	}
	e, err := newEngine(c, queue, "consumer", opts, nil)
	if err != nil {
		return nil, err
	}
	takeTypes[T](e, &typedRoute[T]{handler: h, name: typeName[T]()})
	return &Consumer[T]{e: e}, nil
}

// takeTypes makes r the route of every type a consumer of T takes: T's
// name, the names AcceptTypes gave, and messages with no type (any type,
// for a Consumer[Raw]).
func takeTypes[T any](e *engine, r route) {
	name := typeName[T]()
	e.routes = map[string]route{name: r}
	takes := []string{fmt.Sprintf("%q", name)}
	for _, n := range e.cfg.accept {
		if _, ok := e.routes[n]; !ok {
			e.routes[n] = r
			takes = append(takes, fmt.Sprintf("%q", n))
		}
	}
	e.fallback, e.takes = r, strings.Join(takes, " or ")
	var zero T
	_, e.takesAll = any(zero).(Raw)
}

// Queue is the name of the queue the consumer takes from.
func (c *Consumer[T]) Queue() string { return c.e.queue }

// Run consumes until ctx ends, then stops taking deliveries, lets the
// in-flight ones settle, returns the prefetched-but-unstarted ones to the
// queue and returns nil. Handlers' contexts do not end with ctx (so they can
// finish), only when the Conn closes. Run returns ErrClosed when the Conn
// shuts down or closes, and an error at once if the queue does not exist
// (with NoDeclare, if any queue of its ladder does not: the error names
// them). While paused, by Pause or by its KillSwitch, Run goes on but takes
// nothing. A Consumer runs once at a time. Close stops a Run as its ctx
// ending does (that Run returns nil), and every Run after Close fails with
// ErrConsumerClosed. Between Runs nothing consumes, and Health says so
// (ErrNotRunning) until the next Run, or Close.
func (c *Consumer[T]) Run(ctx context.Context) error { return c.e.run(ctx, nil) }

// Pause stops the consumer taking deliveries without stopping Run: its
// broker subscription is cancelled, the deliveries its handlers are
// running settle as usual, and those prefetched but not started go back to
// the queue unhandled, with no attempt counted. Run goes on, paused, until
// Resume or its ctx ends; while Run runs, Health reports the consumer
// paused, and acemq.consumer.paused counts it. Pause before
// Run makes Run start paused. It is safe from any goroutine, and a second
// Pause does nothing.
//
// On a quorum queue each delivery put back counts towards the queue's
// x-delivery-limit (MaxAttempts+20 with Quorum): a message can be put back
// that many times, less its redeliveries after crashes, before the broker
// dead-letters it to {queue}.dlq.
func (c *Consumer[T]) Pause() { c.e.pauseNow() }

// Resume makes a paused consumer take deliveries again: after Pause, or
// after its kill switch tripped (at once, without waiting for a probe). It
// is safe from any goroutine, and does nothing to a consumer that is not
// paused. Without a Run it only clears the pause.
func (c *Consumer[T]) Resume() { c.e.resume() }

// deliveryKey is the context key of the delivery being handled.
type deliveryKey struct{}

// delivery is the per-delivery state a context carries: the envelope, for
// correlation of what the handler sends, and the WhenSettled callbacks. It
// is itself the handler's context (its parent plus one value), which saves
// a context.WithValue allocation per delivery.
type delivery struct {
	context.Context
	env   *Envelope
	part  int    // an ordered delivery's partition plus one; 0 when not
	fence uint64 // an ordered delivery's fencing token
	// The broker delivered it before, unsettled (Settlement.Redelivered).
	redelivered bool
	mu          sync.Mutex
	callbacks   []func(context.Context, Settlement)
}

// Value returns the delivery for deliveryKey and asks the parent otherwise.
func (d *delivery) Value(key any) any {
	if key == (deliveryKey{}) {
		return d
	}
	return d.Context.Value(key)
}

// incoming returns the envelope of the delivery ctx carries, or nil.
func incoming(ctx context.Context) *Envelope {
	if d, ok := ctx.Value(deliveryKey{}).(*delivery); ok {
		return d.env
	}
	return nil
}

// WhenSettled registers fn to run after the delivery ctx carries settles;
// ctx is one given to a consume interceptor, a middleware or a handler.
// Callbacks run last-registered first, before the Conn's OnSettled hooks.
// Outside a delivery it does nothing. When the engine could not move a
// message (the broker was away), or could not send its ack, the delivery
// goes back to its queue and callbacks see an empty Outcome with the
// reason. Given the ctx of a
// BatchHandler, fn runs once for every message of the batch, as each
// settles.
func WhenSettled(ctx context.Context, fn func(context.Context, Settlement)) {
	v := ctx.Value(deliveryKey{})
	if b, ok := v.(*batchContext); ok {
		for _, m := range b.members {
			WhenSettled(m, fn)
		}
		return
	}
	d, ok := v.(*delivery)
	if !ok || fn == nil {
		return
	}
	d.mu.Lock()
	d.callbacks = append(d.callbacks, fn)
	d.mu.Unlock()
}

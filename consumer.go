package acemq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq/transport"
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
}

// Consumer takes deliveries from one queue and runs them through the
// consume interceptors, the codec and its handler on worker goroutines,
// then settles each one.
type Consumer[T any] struct {
	conn    *Conn
	queue   string
	handler Handler[T]
	cfg     consumerConfig
	policy  RetryPolicy
	tiers   []time.Duration
	name    string // T's name, for reasons
	running atomic.Bool

	moveFailures atomic.Int32 // consecutive failed moves, for the pause after one
}

// NewConsumer returns a consumer of queue that hands T values to h. Unless
// NoDeclare is given it declares, before it returns, the durable queues
// {queue}, {queue}.dlq, {queue}.parked and one {queue}.retry.{delay} per
// delay of the retry policy, plus the bindings Bind asked for, so a publish
// right after it is routable. Start it with Run.
func NewConsumer[T any](c *Conn, queue string, h Handler[T], opts ...ConsumerOption) (*Consumer[T], error) {
	switch {
	case c == nil:
		return nil, errors.New("acemq: NewConsumer was given a nil Conn")
	case queue == "":
		return nil, errors.New("acemq: NewConsumer was given an empty queue name")
	case h == nil:
		return nil, fmt.Errorf("acemq: NewConsumer of %q was given a nil handler", queue)
	}
	cfg := consumerConfig{concurrency: 1, maxBody: DefaultMaxBodySize}
	for _, o := range opts {
		if o != nil {
			o.applyConsumer(&cfg)
		}
	}
	if len(cfg.errs) > 0 {
		return nil, fmt.Errorf("acemq: consumer of %q: %w", queue, errors.Join(cfg.errs...))
	}
	if cfg.prefetch == 0 {
		cfg.prefetch = max(64, 2*cfg.concurrency)
	}
	policy := c.cfg.policy
	if cfg.policy != nil {
		policy = *cfg.policy
	}
	cons := &Consumer[T]{
		conn: c, queue: queue, handler: h, cfg: cfg,
		policy: policy, tiers: policy.tiers(), name: typeName[T](),
	}
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if !cfg.noDeclare {
		ctx, cancel := context.WithTimeout(context.Background(), declareTimeout)
		defer cancel()
		if err := c.t.Declare(ctx, cons.topology()...); err != nil {
			return nil, fmt.Errorf("acemq: declaring the queues of consumer %q: %w", queue, err)
		}
	}
	return cons, nil
}

// declareTimeout bounds NewConsumer's declarations.
const declareTimeout = 30 * time.Second

// topology is what NewConsumer declares.
func (c *Consumer[T]) topology() []Topology {
	main := Queue{Name: c.queue, Quorum: c.cfg.quorum}
	if c.cfg.quorum {
		main.Args = map[string]any{
			"x-delivery-limit":          int64(c.policy.MaxAttempts + 20),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": DeadLetterQueue(c.queue),
		}
	}
	t := []Topology{
		main,
		Queue{Name: DeadLetterQueue(c.queue), Quorum: c.cfg.quorum},
		Queue{Name: ParkingQueue(c.queue), Quorum: c.cfg.quorum},
	}
	for _, d := range c.tiers {
		t = append(t, Queue{Name: RetryQueue(c.queue, d), Args: map[string]any{
			"x-message-ttl":             d.Milliseconds(),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": c.queue,
		}})
	}
	for _, b := range c.cfg.bindings {
		b.Queue = c.queue
		t = append(t, b)
	}
	return t
}

// Queue is the name of the queue the consumer takes from.
func (c *Consumer[T]) Queue() string { return c.queue }

// Run consumes until ctx ends, then stops taking deliveries, lets the
// in-flight ones settle, returns the prefetched-but-unstarted ones to the
// queue and returns nil. Handlers' contexts do not end with ctx (so they can
// finish), only when the Conn closes. Run returns ErrClosed when the Conn
// shuts down or closes, and an error at once if the queue does not exist.
// A Consumer runs once at a time.
func (c *Consumer[T]) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("acemq: the consumer of %q is already running", c.queue)
	}
	defer c.running.Store(false)
	if !c.conn.startConsumer() {
		return ErrClosed
	}
	defer c.conn.consumers.Done()

	consumeCtx, stopConsuming := context.WithCancel(ctx)
	defer stopConsuming()
	defer context.AfterFunc(c.conn.stopping, stopConsuming)()

	handlerCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	defer context.AfterFunc(c.conn.closing, abort)()

	jobs := make(chan transport.Delivery, c.cfg.prefetch)
	var workers sync.WaitGroup
	for range c.cfg.concurrency {
		workers.Go(func() {
			for d := range jobs {
				if consumeCtx.Err() != nil {
					_ = d.Nack(true) // prefetched, not started: back to the queue
					continue
				}
				c.process(handlerCtx, d)
			}
		})
	}
	err := c.conn.t.Consume(consumeCtx, c.queue, c.cfg.prefetch, func(d transport.Delivery) { jobs <- d })
	close(jobs)
	workers.Wait()
	switch {
	case ctx.Err() != nil:
		return nil
	case c.conn.stopping.Err() != nil:
		return ErrClosed
	case err != nil:
		return fmt.Errorf("acemq: consuming %q: %w", c.queue, err)
	}
	return nil
}

// deliveryKey is the context key of the delivery being handled.
type deliveryKey struct{}

// delivery is the per-delivery state a context carries: the envelope, for
// correlation of what the handler sends, and the WhenSettled callbacks. It
// is itself the handler's context (its parent plus one value), which saves
// a context.WithValue allocation per delivery.
type delivery struct {
	context.Context
	env       *Envelope
	mu        sync.Mutex
	callbacks []func(context.Context, Settlement)
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
// message (the broker was away) the delivery goes back to its queue and
// callbacks see an empty Outcome with the reason.
func WhenSettled(ctx context.Context, fn func(context.Context, Settlement)) {
	d, ok := ctx.Value(deliveryKey{}).(*delivery)
	if !ok || fn == nil {
		return
	}
	d.mu.Lock()
	d.callbacks = append(d.callbacks, fn)
	d.mu.Unlock()
}

// process takes one delivery from parse to settlement.
func (c *Consumer[T]) process(ctx context.Context, d transport.Delivery) {
	env, perr := parseEnvelope(&d.Message)
	ds := &delivery{Context: ctx, env: env}
	ctx = ds

	if chain := c.conn.cfg.consumeChain; len(chain) > 0 {
		// The context is the interceptors' to keep (a WhenSettled closure
		// may hold it): it is never reused.
		cc := &ConsumeContext{Queue: c.queue, Envelope: env, Body: bytes.Clone(d.Body), ContentType: d.ContentType}
		reason := runConsumeChain(ctx, chain, cc)
		if cc.Envelope != nil {
			env, ds.env = cc.Envelope, cc.Envelope
		}
		if env.Headers == nil {
			env.Headers = make(map[string]any)
		}
		if reason != "" {
			c.settle(ctx, d, ds, verdict{outcome: OutcomeDeadLettered, reason: reason}, -1)
			return
		}
	}
	if perr != nil {
		c.settle(ctx, d, ds, verdict{outcome: OutcomeParked, reason: "the envelope is unreadable: " + strings.TrimPrefix(perr.Error(), "acemq: "), original: true}, -1)
		return
	}
	if len(d.Body) > c.cfg.maxBody {
		c.settle(ctx, d, ds, verdict{outcome: OutcomeParked, reason: fmt.Sprintf("the body is %d bytes, over the limit of %d", len(d.Body), c.cfg.maxBody)}, -1)
		return
	}
	// The body decodes straight into the Message: one allocation, not two.
	m := &Message[T]{Envelope: env, Queue: c.queue, Redelivered: d.Redelivered}
	if err := c.conn.cfg.codecs.decode(d.ContentType, d.Body, &m.Payload, c.name); err != nil {
		c.settle(ctx, d, ds, verdict{outcome: OutcomeParked, reason: err.Error()}, -1)
		return
	}
	start := nowNano()
	ack, panicked := c.call(ctx, m)
	c.settle(ctx, d, ds, c.judge(env, ack, panicked), sinceSeconds(start))
}

// call runs the handler, turning a panic into its value.
func (c *Consumer[T]) call(ctx context.Context, m *Message[T]) (ack Ack, panicked any) {
	defer func() {
		if r := recover(); r != nil {
			panicked = r
		}
	}()
	return c.handler(ctx, m), nil
}

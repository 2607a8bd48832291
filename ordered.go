package acemq

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq/internal/ordering"
	"github.com/acemq/acemq/transport"
)

// OrderPolicy says how an ordered consumer keeps the messages of one key in
// order; see Ordered.
type OrderPolicy struct {
	// Partitions is how many single-active-consumer queues the keys are
	// hashed into, and so how many instances can share the work. The
	// default is 16; it must be 1 to 1024. It is fixed once declared:
	// NewConsumer fails when the broker has the queue with another count.
	Partitions int
	// BlockOnFailure makes a message that fails for good block its key:
	// the key's later messages are held, durably, until ReleaseKey.
	BlockOnFailure bool
	// AllowKeyless makes the consumer handle messages without a key (no
	// x-acemq-key header: their publisher gave neither the Key send
	// option nor the KeyBy publisher option) instead of parking them. What
	// is lost: their order, among themselves and against keyed messages
	// (they all hash into one partition and run without a lane, as many at
	// once as there are free workers), and the alarm: a publisher that
	// forgot its key goes unnoticed. The default, false, parks each one in
	// {queue}.parked with a reason naming the missing key and the
	// publisher's Origin, logs it and counts it
	// (acemq.consumer.keyless.total).
	AllowKeyless bool
}

// The defaults and bounds of OrderPolicy.
const (
	defaultPartitions = 16
	maxPartitions     = 1024
)

// Ordered makes the consumer (or router) handle the messages of one key
// (Envelope.Key, set with the Key send option) one at a time, in the order
// they were sent, while different keys run concurrently up to Concurrency.
// The consumer declares an x-consistent-hash exchange named after the queue
// that hashes the key into Partitions single-active-consumer queues,
// {queue}.p0 to {queue}.p{n-1}; instances of the consumer spread those
// partitions among themselves. Publish to the exchange {queue}, or Bind it
// to yours. Retries happen in place: a message that asks for another
// attempt waits its delay holding its key, and the total delay of the
// retry policy must stay under RabbitMQ's delivery timeout (15 minutes).
// A message without a key is parked, unless OrderPolicy.AllowKeyless. The
// queue's name must not be a plain queue's: NewConsumer fails when the
// broker has a queue of that name. docs/ordering.md tells the whole story.
// Partitions outside 1 to 1024 (0 is the default) fails the constructor.
// Ordered is a ConsumerOption alone: NewBatchConsumer does not compile
// with it.
func Ordered(p OrderPolicy) ConsumerOption {
	return plainOptionFunc(func(c *consumerConfig) {
		if p.Partitions == 0 {
			p.Partitions = defaultPartitions
		}
		if p.Partitions < 1 || p.Partitions > maxPartitions {
			c.errs = append(c.errs, fmt.Errorf("OrderPolicy.Partitions is %d, want 1 to %d (or 0 for the default, %d)",
				p.Partitions, maxPartitions, defaultPartitions))
			return
		}
		c.order = &p
	})
}

// PartitionQueue is the name of partition i of an ordered consumer's
// queue: "orders.p0".
func PartitionQueue(queue string, i int) string { return ordering.PartitionQueue(queue, i) }

// orderedMode is an Ordered engine's: the consistent-hash exchange, its
// partitions and the blocked-key registry, consumed by internal/ordering,
// which settles every attempt through Handle, the settle core with
// orderedFate. It is the ordering.Host of the runs it starts.
type orderedMode struct {
	e   *engine
	b   ordering.Broker
	run atomic.Pointer[ordering.Run] // the running subscription, for Partitions
}

// newOrderedMode checks what an ordered engine needs beyond the options: a
// transport with leases and hand-over consumers, and a retry policy whose
// waits fit in the broker's delivery timeout.
func newOrderedMode(e *engine) (*orderedMode, error) {
	caps := e.conn.caps
	if caps.leaser == nil {
		return nil, fmt.Errorf("acemq: %s of %q is Ordered, but its transport (%T) has no leases (transport.Leaser)", e.who, e.queue, e.conn.t)
	}
	if caps.handOver == nil {
		return nil, fmt.Errorf("acemq: %s of %q is Ordered, but its transport (%T) cannot hand a queue over (transport.HandOverConsumer)", e.who, e.queue, e.conn.t)
	}
	if total := e.policy.totalDelay(); total > ordering.MaxInPlaceDelay {
		return nil, fmt.Errorf("acemq: %s of %q is Ordered, and its retry policy waits %v in all; retries happen in place, holding the delivery unacked, so the total must stay under RabbitMQ's delivery timeout of %v (a longer wait closes the channel and redelivers the message): give fewer attempts or shorter delays",
			e.who, e.queue, total, ordering.MaxInPlaceDelay)
	}
	b := ordering.Broker{T: e.conn.t, Leaser: caps.leaser, HandOver: caps.handOver,
		Fencer: caps.fencer, Liveness: caps.liveness, Log: e.conn.cfg.logger}
	return &orderedMode{e: e, b: b}, nil
}

// totalDelay is the sum of the waits between the policy's attempts.
func (p RetryPolicy) totalDelay() time.Duration {
	var total time.Duration
	for a := 2; a <= p.MaxAttempts; a++ {
		total += p.delayFor(a)
	}
	return total
}

func (m *orderedMode) label() string { return "ordered " }

// topology is what an ordered engine declares, the exchange first.
func (m *orderedMode) topology() []Topology {
	e := m.e
	q := e.cfg.quorum
	t := []Topology{Exchange{Name: e.queue, Kind: "x-consistent-hash", Args: map[string]any{"hash-header": hdrKey}}}
	for i := range e.cfg.order.Partitions {
		args := map[string]any{"x-single-active-consumer": true}
		if q {
			args["x-delivery-limit"] = int64(e.policy.MaxAttempts + 20)
			args["x-dead-letter-exchange"] = ""
			args["x-dead-letter-routing-key"] = DeadLetterQueue(e.queue)
		}
		name := PartitionQueue(e.queue, i)
		t = append(t, Queue{Name: name, Quorum: q, Args: args}, Binding{Exchange: e.queue, Key: "1", Queue: name})
	}
	t = append(t,
		Queue{Name: DeadLetterQueue(e.queue), Quorum: q},
		Queue{Name: ParkingQueue(e.queue), Quorum: q},
		ordering.MembersTopology(e.queue),
		Queue{Name: ordering.BlockedQueue(e.queue), Quorum: q},
		ordering.StatusTopology(e.queue), // see ordering.StatusQueue
	)
	for _, b := range e.cfg.bindings {
		t = append(t, ExchangeBinding{Source: b.Exchange, Key: b.Key, Destination: e.queue})
	}
	return t
}

// ladder is every queue an ordered engine takes from or moves to that
// NoDeclare expects to find ({queue}.members is declared by the
// spreading): the partitions, .dlq, .parked and {queue}.blocked.
func (m *orderedMode) ladder() []string {
	e := m.e
	var names []string
	for i := range e.cfg.order.Partitions {
		names = append(names, PartitionQueue(e.queue, i))
	}
	return append(names, DeadLetterQueue(e.queue), ParkingQueue(e.queue), ordering.BlockedQueue(e.queue))
}

// declare checks that the broker has no other partition count for the
// queue, then declares the ordered topology, both holding the lease
// {queue}.declare (ordering.LockDeclare), so that instances started at the
// same moment never check while another one is halfway through declaring.
// A broker without the consistent-hash exchange
// (transport.ErrMissingPlugin) gets an error that says how to enable it.
func (m *orderedMode) declare(ctx context.Context) error {
	e := m.e
	lock, err := ordering.LockDeclare(ctx, m.b, e.queue)
	if err != nil {
		return fmt.Errorf("acemq: %s of %q: %w", e.who, e.queue, err)
	}
	defer lock.Unlock(ctx)
	if err := m.checkDeclared(ctx); err != nil {
		return err
	}
	err = e.conn.t.Declare(ctx, m.topology()...)
	switch {
	case errors.Is(err, transport.ErrMissingPlugin):
		return fmt.Errorf("acemq: declaring the exchange %q of ordered %s %q: the broker has no x-consistent-hash exchange type; enable the plugin rabbitmq_consistent_hash_exchange (rabbitmq-plugins enable rabbitmq_consistent_hash_exchange): %w",
			e.queue, e.who, e.queue, err)
	case err != nil:
		return fmt.Errorf("acemq: declaring the queues of ordered %s %q: %w", e.who, e.queue, err)
	}
	return nil
}

// checkDeclared fails when the queue was declared with another number of
// partitions: if {queue}.p0 exists, {queue}.p{P-1} must too and
// {queue}.p{P} must not. The error names the count the broker has.
func (m *orderedMode) checkDeclared(ctx context.Context) error {
	e := m.e
	p := e.cfg.order.Partitions
	exists := func(i int) (bool, error) {
		_, err := e.conn.t.Inspect(ctx, PartitionQueue(e.queue, i))
		switch {
		case errors.Is(err, transport.ErrNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("acemq: %s of %q: looking for queue %q: %w", e.who, e.queue, PartitionQueue(e.queue, i), err)
		}
		return true, nil
	}
	first, err := exists(0)
	if err != nil || !first {
		return err
	}
	last, err := exists(p - 1)
	if err != nil {
		return err
	}
	beyond, err := exists(p)
	if err != nil {
		return err
	}
	if last && !beyond {
		return nil
	}
	n := p - 1
	if !last {
		for n > 0 {
			ok, err := exists(n - 1)
			if err != nil {
				return err
			}
			if ok {
				break
			}
			n--
		}
	} else {
		n = p + 1
		for n < maxPartitions+1 {
			ok, err := exists(n)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			n++
		}
	}
	return fmt.Errorf("acemq: %s of %q asks for %d partitions, but the queue was declared with %d (%s to %s exist); the count is fixed once declared: give Partitions %d, or delete the partition queues and the exchange %q first (their messages with them)",
		e.who, e.queue, p, n, PartitionQueue(e.queue, 0), PartitionQueue(e.queue, n-1), n, e.queue)
}

// Partitions returns the partitions this instance holds now, in order:
// none before Run or after it returned, and none for a consumer that is
// not Ordered.
func (c *Consumer[T]) Partitions() []int { return c.e.partitions() }

// Partitions returns the partitions this instance of the router holds
// now, as Consumer.Partitions does.
func (r *Router) Partitions() []int {
	if r == nil || r.e == nil {
		return nil
	}
	return r.e.partitions()
}

func (e *engine) partitions() []int { return e.mode.held() }

// held is the partitions this instance holds now, in order.
func (m *orderedMode) held() []int {
	if run := m.run.Load(); run != nil {
		return run.Held()
	}
	return nil
}

// subscribed is the queues whose subscriptions say whether the ordered
// engine consumes: its members queue and the partitions it holds.
func (m *orderedMode) subscribed() []string {
	queues := []string{ordering.MembersQueue(m.e.queue)}
	for _, i := range m.held() {
		queues = append(queues, PartitionQueue(m.e.queue, i))
	}
	return queues
}

// admit parks a delivery without a key (no x-acemq-key header, as the
// partitions' lanes read it), unless OrderPolicy.AllowKeyless.
func (m *orderedMode) admit(d transport.Delivery, env *Envelope) (verdict, bool) {
	if m.e.cfg.order.AllowKeyless || ordering.KeyOf(d.Headers) != "" {
		return verdict{}, true
	}
	return m.keyless(env), false
}

// keyless is the verdict on a delivery without a key (no x-acemq-key
// header, as the partitions' lanes read it) that reached an ordered
// consumer without OrderPolicy.AllowKeyless: parked, with a reason that
// names the missing key and the publisher, and logged once here, where it
// is screened. Its publisher forgot Key or KeyBy, and handling it anyway
// would lose its order without a word.
func (m *orderedMode) keyless(env *Envelope) verdict {
	e := m.e
	origin := env.Origin
	if origin == "" {
		origin = "unknown (no app-id)"
	}
	e.conn.cfg.logger.Warn("acemq: an ordered consumer took a message without a key; it is parked",
		"queue", e.queue, "id", env.ID, "type", env.Type, "origin", origin)
	return verdict{outcome: OutcomeParked, keyless: true, reason: fmt.Sprintf(
		"the message has no key (header %s), and ordered %s %q keeps order only by key; its publisher, Origin %s, must give one (the Key send option, or the KeyBy publisher option), or the consumer must take keyless messages without order (OrderPolicy.AllowKeyless)",
		hdrKey, e.who, e.queue, origin)}
}

// subscribe runs one subscription of the ordered queue in internal/ordering,
// with the blocked_keys gauge observing it.
func (m *orderedMode) subscribe(s subscription) (bool, error) {
	e := m.e
	probe := 0
	if s.probe {
		probe = probeDeliveries
	}
	run := ordering.NewRun(ordering.Config{
		Broker: m.b, Queue: e.queue, Partitions: e.cfg.order.Partitions, Quorum: e.cfg.quorum,
		BlockOnFailure: e.cfg.order.BlockOnFailure, Concurrency: e.cfg.concurrency, Prefetch: e.cfg.prefetch,
		Ops: &e.conn.registryOps,
	}, m)
	m.run.Store(run)
	defer m.run.Store(nil)
	if reg, err := e.conn.metrics.observeBlocked(e.queue, run.BlockedKeys); err == nil {
		defer func() { _ = reg.Unregister() }()
	}
	return run.Serve(s.takeCtx, s.handlerCtx, probe, s.stopTaking)
}

// Handle is the settle core for one attempt of an ordered delivery, with
// orderedFate as its failure policy (ordering.Host).
func (m *orderedMode) Handle(ctx context.Context, a *ordering.Attempt) (retry bool, wait time.Duration) {
	v := m.e.process(ctx, a.Delivery(), orderedFate{a})
	return v.outcome == OutcomeRetried, v.delay
}

// Relocate is Conn.relocate (ordering.Host).
func (m *orderedMode) Relocate(ctx context.Context, msg transport.Message, from *transport.Delivery) (ackErr, err error) {
	return m.e.conn.relocate(ctx, msg, from)
}

// Backoff is the engine's moveBackoff (ordering.Host).
func (m *orderedMode) Backoff(failed bool) time.Duration { return m.e.moveBackoff(failed) }

// orderedFate is an ordered delivery's failure policy: a retry happens in
// place (the attempt records it, the delivery stays unacked and its key
// waits); any other failure blocks the key first, with BlockOnFailure, and
// moves the message, each step tried until it works or the partition
// stops, never nacked back to the queue (that would put it behind the
// key's next messages).
type orderedFate struct{ a *ordering.Attempt }

func (f orderedFate) begin(env *Envelope) (part int, fence uint64) {
	if n := f.a.Number(); n > 0 {
		env.Attempt, env.Error = n, f.a.LastErr()
	}
	return f.a.Partition(), f.a.Fence()
}

// yield is ordering's Attempt.Yield: the one place that knows a partition
// was lost (or a store fenced the handler's write).
func (f orderedFate) yield(ctx context.Context, err error) bool { return f.a.Yield(ctx, err) }

func (f orderedFate) carry(ctx context.Context, e *engine, d transport.Delivery, env *Envelope, v verdict) (verdict, string, error) {
	if v.outcome == OutcomeRetried {
		v.delay = f.a.InPlace(env.Attempt+1, v.reason, v.delay)
		return v, "", nil
	}
	if err := f.a.Fail(ctx, env.ID, v.reason, "moving it to "+e.target(v), func() error {
		return e.move(ctx, d, env, v)
	}); err != nil {
		return v, "its queue, unsettled", err
	}
	e.moveBackoff(false)
	return v, "", nil
}

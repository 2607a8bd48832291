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

// engine is what a Consumer and a Router share: one queue, its ladder, the
// workers, the consume chain and the settlement of every delivery. It knows
// nothing of payload types; the typed part of a delivery (the decode and the
// handler) is a route it picks by the envelope's type. Run, the worker loop
// and the subscription live here, once, for both, and so does what stops
// and restarts taking deliveries (Pause, Resume and the kill switch).
type engine struct {
	conn   *Conn
	queue  string
	who    string // "consumer" or "router", for errors
	cfg    consumerConfig
	policy RetryPolicy
	tiers  []time.Duration

	running      atomic.Bool
	moveFailures atomic.Int32 // consecutive failed moves, for the pause after one
	pause        pauser       // Pause's and the kill switch's

	ordered atomic.Pointer[orderedRun] // the running subscription of an Ordered engine

	// The routing table, fixed while Run runs: routes by type name, the
	// route for a message without a type (or for any type, with takesAll),
	// and what a refusal names.
	routes   map[string]route
	fallback route
	takesAll bool
	takes    string // the consumer's type names, quoted: "OrderPlaced"

	batch batchServer // a batch consumer's handler; nil for the others
}

// route is the typed part of a delivery: decode the body into its T, run
// its handler and judge what it asked for. It returns the verdict and the
// handler's time in seconds (negative when the handler did not run).
type route interface {
	serve(ctx context.Context, e *engine, d transport.Delivery, env *Envelope) (verdict, float64)
}

// typedRoute is a Handler[T] with what it takes to decode for it.
type typedRoute[T any] struct {
	handler Handler[T]
	name    string // T's name, for reasons
}

func (r *typedRoute[T]) serve(ctx context.Context, e *engine, d transport.Delivery, env *Envelope) (verdict, float64) {
	// The body decodes straight into the Message: one allocation, not two.
	m := &Message[T]{Envelope: env, Queue: e.queue, Redelivered: d.Redelivered}
	if err := e.conn.decode(ctx, d.ContentType, d.Body, &m.Payload, r.name); err != nil {
		return verdict{outcome: OutcomeParked, reason: err.Error()}, -1
	}
	start := nowNano()
	ack, panicked := r.call(ctx, m)
	return e.judge(env, ack, panicked), sinceSeconds(start)
}

// call runs the handler, turning a panic into its value.
func (r *typedRoute[T]) call(ctx context.Context, m *Message[T]) (ack Ack, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	return r.handler(ctx, m), nil
}

// newEngine applies opts and, unless NoDeclare, declares the queue's
// topology, with DeclareContext's ctx or within declareTimeout. A
// configuration or declaration error is returned (with the engine, which
// NewRouter keeps so that Run reports the error).
func newEngine(c *Conn, queue, who string, opts []ConsumerOption) (*engine, error) {
	if c == nil {
		return nil, fmt.Errorf("acemq: the %s was given a nil Conn", who)
	}
	if queue == "" {
		return nil, fmt.Errorf("acemq: the %s was given an empty queue name", who)
	}
	cfg := consumerConfig{concurrency: 1, maxBody: DefaultMaxBodySize}
	for _, o := range opts {
		if o != nil {
			o.applyConsumer(&cfg)
		}
	}
	if who == "router" && len(cfg.accept) > 0 {
		cfg.errs = append(cfg.errs, errors.New("AcceptTypes is for a Consumer; give a route TypeName instead"))
	}
	if len(cfg.errs) > 0 {
		return nil, fmt.Errorf("acemq: %s of %q: %w", who, queue, errors.Join(cfg.errs...))
	}
	if cfg.prefetch == 0 {
		cfg.prefetch = max(64, 2*cfg.concurrency)
	}
	policy := c.cfg.policy
	if cfg.policy != nil {
		policy = *cfg.policy
	}
	cfg.quorum = cfg.quorum || c.cfg.quorumQueues
	e := &engine{conn: c, queue: queue, who: who, cfg: cfg, policy: policy, tiers: policy.tiers()}
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if cfg.order != nil {
		if err := e.checkOrdered(); err != nil {
			return nil, err
		}
	}
	if !cfg.noDeclare {
		ctx := cfg.declareCtx
		if ctx == nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.Background(), declareTimeout)
			defer cancel()
		}
		if err := e.declare(ctx); err != nil {
			return e, err
		}
	}
	return e, nil
}

// declare declares the queue's topology within ctx.
func (e *engine) declare(ctx context.Context) error {
	if e.cfg.order != nil {
		return e.declareOrdered(ctx)
	}
	if err := e.conn.t.Declare(ctx, e.topology()...); err != nil {
		return fmt.Errorf("acemq: declaring the queues of %s %q: %w", e.who, e.queue, err)
	}
	return nil
}

// declareTimeout bounds the declarations of NewConsumer and NewRouter
// when DeclareContext gave no ctx.
const declareTimeout = 30 * time.Second

// topology is what the constructor declares.
func (e *engine) topology() []Topology {
	if e.cfg.order != nil {
		return e.orderedTopology()
	}
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

// ladder is every queue a delivery of this engine can be moved to, and the
// queue itself first (for Ordered, orderedLadder).
func (e *engine) ladder() []string {
	if e.cfg.order != nil {
		return e.orderedLadder()
	}
	names := []string{e.queue, DeadLetterQueue(e.queue), ParkingQueue(e.queue)}
	for _, d := range e.tiers {
		names = append(names, RetryQueue(e.queue, d))
	}
	return names
}

// checkLadder looks, passively, for the queue and its ladder queues, and
// fails naming the ones that do not exist. It is what NoDeclare does at Run
// instead of declaring: without it a move to a missing queue would fail
// and come back for as long as the consumer runs. With Ordered the ladder
// is the partitions, .dlq, .parked and {queue}.blocked, and another
// partition count on the broker fails too.
func (e *engine) checkLadder(ctx context.Context) error {
	var missing []string
	for _, name := range e.ladder() {
		_, err := e.conn.t.Inspect(ctx, name)
		switch {
		case errors.Is(err, transport.ErrNotFound):
			missing = append(missing, name)
		case err != nil:
			return fmt.Errorf("acemq: %s of %q: looking for queue %q: %w", e.who, e.queue, name, err)
		}
	}
	if len(missing) > 0 {
		ordered := ""
		if e.cfg.order != nil {
			ordered = "ordered "
		}
		return fmt.Errorf("acemq: %s%s of %q was given NoDeclare, but these queues do not exist: %s (declare them, or drop NoDeclare)",
			ordered, e.who, e.queue, strings.Join(missing, ", "))
	}
	if e.cfg.order != nil {
		return e.checkPartitionCount(ctx) // and no partition beyond the count
	}
	return nil
}

// run consumes until ctx ends; see Consumer.Run. setup, when given, runs
// first, once the engine is known not to be running already: the Router
// builds its routing table there.
func (e *engine) run(ctx context.Context, setup func() error) error {
	if !e.running.CompareAndSwap(false, true) {
		return fmt.Errorf("acemq: the %s of %q is already running", e.who, e.queue)
	}
	defer e.running.Store(false)
	if setup != nil {
		if err := setup(); err != nil {
			return err
		}
	}
	if e.cfg.noDeclare {
		if err := e.checkLadder(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	if !e.conn.startConsumer() {
		return ErrClosed
	}
	defer e.conn.consumers.Done()

	consumeCtx, stopConsuming := context.WithCancel(ctx)
	defer stopConsuming()
	defer context.AfterFunc(e.conn.stopping, stopConsuming)()

	handlerCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	defer context.AfterFunc(e.conn.closing, abort)()

	e.startRun()
	e.conn.addRunning(e)
	defer e.conn.removeRunning(e)
	var err error
	for consumeCtx.Err() == nil {
		var more bool
		if more, err = e.subscribe(consumeCtx, handlerCtx); !more {
			break
		}
	}
	switch {
	case ctx.Err() != nil:
		return nil
	case e.conn.stopping.Err() != nil:
		return ErrClosed
	case err != nil:
		return fmt.Errorf("acemq: consuming %q: %w", e.queue, err)
	}
	return nil
}

// subscribe does what the pause state asks: waits while the engine is
// paused, or runs one subscription to the queue (in full, or as a kill
// switch probe) until it ends. It reports whether run should go on, which
// it should after a wait or after a subscription the engine stopped; not
// after Consume failed, nor after it returned by itself.
func (e *engine) subscribe(consumeCtx, handlerCtx context.Context) (more bool, err error) {
	// stop returns the prefetched deliveries; stopTaking only stops the
	// taking, so a probe's deliveries are still handled.
	stopCtx, stop := context.WithCancel(consumeCtx)
	defer stop()
	takeCtx, stopTaking := context.WithCancel(stopCtx)
	defer stopTaking()
	m, gen, changed, probeAt := e.next(stop, stopTaking)
	if m == modeWait {
		var due <-chan time.Time
		if !probeAt.IsZero() {
			t := time.NewTimer(time.Until(probeAt))
			defer t.Stop()
			due = t.C
		}
		select {
		case <-changed:
		case <-due:
		case <-consumeCtx.Done():
		}
		return true, nil
	}
	defer e.ended(gen)
	if e.cfg.order != nil {
		return e.subscribeOrdered(takeCtx, handlerCtx, m, stopTaking)
	}

	prefetch, workers := e.cfg.prefetch, e.cfg.concurrency
	if m == modeProbe {
		prefetch, workers = min(prefetch, probeDeliveries), min(workers, probeDeliveries)
	}
	jobs := make(chan job, prefetch)
	var wg sync.WaitGroup
	if e.batch != nil {
		// A batch consumer's workers take batches, gathered from jobs.
		e.startBatches(&wg, jobs, workers, consumeCtx, stopCtx, takeCtx, handlerCtx)
		workers = 0
	}
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				if !j.take || stopCtx.Err() != nil {
					_ = j.d.Nack(true) // prefetched, not started: back to the queue
					continue
				}
				e.process(handlerCtx, j.d)
			}
		})
	}
	taken := 0
	err = e.conn.t.Consume(takeCtx, e.queue, prefetch, func(d transport.Delivery) {
		taken++
		if m == modeProbe && taken >= probeDeliveries {
			stopTaking() // a probe is this many deliveries
		}
		jobs <- job{d: d, take: m == modeFull || taken <= probeDeliveries}
	})
	close(jobs)
	wg.Wait()
	return err == nil && takeCtx.Err() != nil, err
}

// job is a delivery for a worker, and whether to handle it (or put it
// back: a delivery past a probe's few).
type job struct {
	d    transport.Delivery
	take bool
}

// pick chooses the route for a message of type typ, or says why there is
// none.
func (e *engine) pick(typ string) (route, string) {
	if r, ok := e.routes[typ]; ok {
		return r, ""
	}
	if e.fallback != nil && (typ == "" || e.takesAll) {
		return e.fallback, ""
	}
	if e.takes == "" {
		return nil, fmt.Sprintf("no handler for type %q on queue %q", typ, e.queue)
	}
	return nil, fmt.Sprintf("the message is of type %q; this consumer takes %s", typ, e.takes)
}

// process takes one delivery from parse to settlement.
func (e *engine) process(ctx context.Context, d transport.Delivery) {
	ctx, ds, r := e.prepare(ctx, d)
	if r == nil {
		return
	}
	v, seconds := r.serve(ctx, e, d, ds.env)
	e.settle(ctx, d, ds, v, seconds)
}

// prepare takes a delivery through all that comes before its handler: the
// envelope, the consume interceptors, the checks and the choice of route.
// A delivery that goes no further is settled here, and the route is nil.
func (e *engine) prepare(ctx context.Context, d transport.Delivery) (context.Context, *delivery, route) {
	env, perr := parseEnvelope(&d.Message)
	ds := &delivery{Context: ctx, env: env}
	r, v := e.screen(ds, d, perr)
	if r == nil {
		e.settle(ds, d, ds, v, -1)
	}
	return ds, ds, r
}

// screen runs the consume interceptors and the checks on a delivery whose
// envelope ds holds (perr is what parsing it said) and picks its route.
// The route is nil when the delivery goes no further; the verdict then
// says where it goes. An interceptor's envelope replaces ds.env.
func (e *engine) screen(ds *delivery, d transport.Delivery, perr error) (route, verdict) {
	env := ds.env
	if chain := e.conn.cfg.consumeChain; len(chain) > 0 {
		// The context is the interceptors' to keep (a WhenSettled closure
		// may hold it): it is never reused.
		cc := &ConsumeContext{Queue: e.queue, Envelope: env, Body: bytes.Clone(d.Body), ContentType: d.ContentType}
		reason := runConsumeChain(ds, chain, cc)
		if cc.Envelope != nil {
			env, ds.env = cc.Envelope, cc.Envelope
		}
		if env.Headers == nil {
			env.Headers = make(map[string]any)
		}
		if reason != "" {
			return nil, verdict{outcome: OutcomeDeadLettered, reason: reason}
		}
	}
	if perr != nil {
		return nil, verdict{outcome: OutcomeParked, reason: "the envelope is unreadable: " + perr.Error(), original: true}
	}
	if len(d.Body) > e.cfg.maxBody {
		return nil, verdict{outcome: OutcomeParked, reason: fmt.Sprintf("the body is %d bytes, over the limit of %d", len(d.Body), e.cfg.maxBody)}
	}
	r, reason := e.pick(env.Type)
	if r == nil {
		return nil, verdict{outcome: OutcomeParked, reason: reason}
	}
	return r, verdict{}
}

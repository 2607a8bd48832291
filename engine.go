package acemq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
	life         lifecycle    // starting, running, faulted or stopped, for HealthReport
	busy         inFlight     // the handler calls running now, for StuckAfter
	end          ending       // Close's: closed, and the running Run to stop
	seq          uint64       // its place among the Conn's engines (Conn.register)

	mode deliveryMode // plain, batch or ordered: topology, ladder, subscription

	// The routing table, fixed while Run runs: routes by type name, the
	// route for a message without a type (or for any type, with takesAll),
	// and what a refusal names.
	routes   map[string]route
	fallback route
	takesAll bool
	takes    string // the consumer's type names, quoted: "OrderPlaced"
}

// newEngine applies opts, picks the engine's mode (batch when batch is not
// nil, ordered with Ordered, plain otherwise) and, unless NoDeclare,
// declares the queue's topology, with DeclareContext's ctx or within
// declareTimeout. A configuration or declaration error is returned (with
// the engine, which NewRouter keeps so that Run reports the error).
func newEngine(c *Conn, queue, who string, opts []ConsumerOption, batch batchServer) (*engine, error) {
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
		cfg.prefetch = min(maxPrefetch, max(64, 2*cfg.concurrency))
	}
	if cfg.stuckAfter == 0 {
		cfg.stuckAfter = DefaultStuckAfter
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
	switch {
	case batch != nil:
		e.mode = &batchMode{plainMode: plainMode{e}, server: batch}
	case cfg.order != nil:
		m, err := newOrderedMode(e)
		if err != nil {
			return nil, err
		}
		e.mode = m
	default:
		e.mode = plainMode{e}
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
	c.register(e)
	return e, nil
}

// declare declares the queue's topology within ctx, once the broker is
// known not to have the name as the other kind (see checkKind).
func (e *engine) declare(ctx context.Context) error {
	if err := e.checkKind(ctx); err != nil {
		return err
	}
	return e.mode.declare(ctx)
}

// declareTimeout bounds the declarations of NewConsumer and NewRouter
// when DeclareContext gave no ctx.
const declareTimeout = 30 * time.Second

// topology is what the constructor declares.
func (e *engine) topology() []Topology { return e.mode.topology() }

// checkLadder looks, passively, for the queue and its ladder queues, and
// fails naming the ones that do not exist. It is what NoDeclare does at Run
// instead of declaring: without it a move to a missing queue would fail
// and come back for as long as the consumer runs. The name's kind is
// checked first (see checkKind), and the mode checks what else it needs
// (Ordered: the partition count).
func (e *engine) checkLadder(ctx context.Context) error {
	if err := e.checkKind(ctx); err != nil {
		return err
	}
	var missing []string
	for _, name := range e.mode.ladder() {
		_, err := e.conn.t.Inspect(ctx, name)
		switch {
		case errors.Is(err, transport.ErrNotFound):
			missing = append(missing, name)
		case err != nil:
			return fmt.Errorf("acemq: %s of %q: looking for queue %q: %w", e.who, e.queue, name, err)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("acemq: %s%s of %q was given NoDeclare, but these queues do not exist: %s (declare them, or drop NoDeclare)",
			e.mode.label(), e.who, e.queue, strings.Join(missing, ", "))
	}
	return e.mode.checkDeclared(ctx)
}

// run consumes until ctx ends; see Consumer.Run. setup, when given, runs
// first, once the engine is known not to be running already: the Router
// builds its routing table there. What it returns is the engine's state
// from then on: stopped after nil or a Conn that stopped it (ErrClosed),
// faulted after an error. After Close it fails at once; Close ends ctx
// (see beginRun).
func (e *engine) run(ctx context.Context, setup func() error) error {
	if !e.running.CompareAndSwap(false, true) {
		if e.closed() {
			return &closedError{who: e.who, queue: e.queue}
		}
		return fmt.Errorf("acemq: the %s of %q is already running", e.who, e.queue)
	}
	defer e.running.Store(false)
	ctx, ended, err := e.beginRun(ctx)
	if err != nil {
		return err
	}
	defer ended()
	e.setState(StateStarting, nil)
	err = e.runOnce(ctx, setup)
	if err == nil || errors.Is(err, ErrClosed) && e.conn.stopping.Err() != nil {
		e.setState(StateStopped, nil)
	} else {
		e.setState(StateFaulted, err)
	}
	return err
}

// runOnce is run, once the engine is known not to be running already.
func (e *engine) runOnce(ctx context.Context, setup func() error) error {
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
	e.conn.watchDelays(ctx) // a delay topology declared since Connect
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
	// Listed as running before it says it consumes, so that whoever sees
	// it consuming (Health, a test) finds its metrics' points too.
	e.conn.addRunning(e)
	defer e.conn.removeRunning(e)
	e.setState(StateConsuming, nil)
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
	if m == takeNone {
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
	return e.mode.subscribe(subscription{
		consumeCtx: consumeCtx, stopCtx: stopCtx, takeCtx: takeCtx, handlerCtx: handlerCtx,
		stopTaking: stopTaking, probe: m == takeProbe,
	})
}

// failureLevel is the level to log a failure in a handler's ctx at: Warn,
// or Debug once the Conn is closing (Close began, so the handlers' ctx
// ends and publishes fail) or ctx has ended, when the failure is what the
// caller asked for.
func (e *engine) failureLevel(ctx context.Context) slog.Level {
	if ctx.Err() != nil || e.conn.closing.Err() != nil {
		return slog.LevelDebug
	}
	return slog.LevelWarn
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

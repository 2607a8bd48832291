package ordering

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/acemq/acemq/transport"
)

// Host is the consumer around an ordered run: the root's settle core, which
// the lanes call for every attempt of a delivery, and what a move needs.
type Host interface {
	// Handle takes one attempt of a.Delivery() from parse to settlement,
	// with a.InPlace and a.Fail as its failure policy, and reports whether
	// it asked for another attempt in place, and after how long.
	Handle(ctx context.Context, a *Attempt) (retry bool, wait time.Duration)
	// Relocate publishes msg, confirmed, and then acks from; err is the
	// publish's (from is then unsettled), ackErr the ack's.
	Relocate(ctx context.Context, msg transport.Message, from *transport.Delivery) (ackErr, err error)
	// Backoff records a failed step (or, with failed false, one that
	// worked) and returns how long to pause before trying again.
	Backoff(failed bool) time.Duration
}

// Config is one ordered queue as its consumer was configured.
type Config struct {
	Broker
	Queue          string
	Partitions     int
	Quorum         bool
	BlockOnFailure bool
	Concurrency    int // workers
	Prefetch       int // per partition
	// Ops serialises the registries of one connection (see NewRegistry).
	Ops *sync.Map
}

// Bounds of the pause between two reads of the registry that failed.
const (
	minPause = 50 * time.Millisecond
	maxPause = 5 * time.Second
)

// Run is one subscription of an ordered queue by this instance: the
// partitions the spreader gives it, each consumed with ConsumeHandOver, and
// the lanes that keep the messages of one key one at a time. Held and
// BlockedKeys are safe from any goroutine. Every field below mu is guarded
// by it.
type Run struct {
	cfg  Config
	host Host
	reg  *Registry
	id   string // the instance, in its statuses

	// Set by Serve before anything starts.
	handlerCtx context.Context // ends only when the Conn closes
	runCtx     context.Context // ends when the subscription stops taking
	fail       func(error)     // ends the subscription with an error
	probe      int             // > 0: start only this many deliveries
	stopTaking context.CancelFunc
	parts      sync.WaitGroup // the partitions' ConsumeHandOver calls
	watch      sync.WaitGroup // the watchdog
	workers    sync.WaitGroup

	mu      sync.Mutex
	cond    sync.Cond
	held    map[int]*partition
	lanes   map[string]*lane
	ready   []*Attempt // lane heads and keyless deliveries, to start in this order
	closed  bool       // the workers end once ready is empty
	started int        // deliveries started, for a probe
}

// partition is one subscription to a partition queue.
type partition struct {
	i       int
	ctx     context.Context
	cancel  context.CancelFunc
	stopped bool // guarded by Run.mu
	// Its Consume goroutine's: the registry was read and the fence taken
	// after the first delivery of the current channel, and that channel's
	// acknowledger.
	loaded bool
	acker  transport.Acknowledger
	// Guarded by Run.mu: the fence of the current channel and the context
	// its handlers run in (cancelled, with ErrLost, once the partition is
	// lost); sub ends the current ConsumeHandOver, refused says it was
	// ended to be tried again (a Fence that failed, the watchdog).
	fence   uint64
	hctx    context.Context
	hcancel context.CancelCauseFunc
	sub     context.CancelFunc
	refused bool
	// Guarded by Run.mu: the refusals of the partition in a row (each
	// within refusalMemory of the one before), which set the pause before
	// it is subscribed again, and when the last one was.
	refusals  int
	refusedAt time.Time
}

// refusalMemory is how long a partition remembers its last refusal: one
// more within it doubles the pause before the partition is subscribed
// again (from minPause up to maxPause); after it, the pause starts over.
const refusalMemory = time.Minute

// ErrLost is the cause of a handler's context cancelled because this
// instance lost the delivery's partition: its lease ended, its
// subscription or channel went, or the broker was not heard within the
// heartbeat timeout (transport.Liveness). Another instance may hold the
// partition by now. It is package acemq's ErrPartitionLost, so its text
// begins "acemq: ".
var ErrLost = errors.New("acemq: the partition was lost to this instance")

// itemState is where a delivery is in its lane.
type itemState int

const (
	itemQueued  itemState = iota // behind its key's running delivery
	itemReady                    // in ready, to be started
	itemRunning                  // on a worker
	itemWaiting                  // waiting for an attempt in place
)

// Attempt is one delivery of a partition and what its attempts so far
// left; the lanes hand it to Host.Handle.
type Attempt struct {
	run      *Run
	d        transport.Delivery
	p        *partition
	key      string
	state    itemState
	attempt  int           // the attempt to run next, after a retry in place; 0 before one
	lastErr  string        // the reason of the attempt before
	waited   time.Duration // the delays waited in place so far
	timer    *time.Timer
	blocked  bool // its failure blocked its key
	fence    uint64
	hctx     context.Context // its handler's: ends when the partition is lost
	fromHeld bool            // taken from its key's held queue by a release
	yielded  bool            // Yield gave it back
	stale    bool            // its channel is gone (the broker delivers it again); guarded by Run.mu
}

// lane is the deliveries of one key, the running (or waiting) one first.
type lane struct{ items []*Attempt }

// NewRun returns the ordered consumption cfg describes, settling through
// host. It starts nothing; Serve does.
func NewRun(cfg Config, host Host) *Run {
	o := &Run{
		cfg: cfg, host: host,
		reg:   NewRegistry(cfg.Broker, cfg.Ops, cfg.Queue, cfg.Quorum),
		id:    instanceID(),
		held:  make(map[int]*partition),
		lanes: make(map[string]*lane),
	}
	o.cond.L = &o.mu
	return o
}

// Serve runs one subscription: the spreader says which partitions to hold;
// each held partition is consumed and its deliveries go through the lanes
// to Concurrency workers (with probe above 0, at most probe of them, which
// start only probe deliveries and then call stopTaking). When takeCtx ends
// it starts nothing more, lets the running handlers settle (in handlerCtx)
// and gives every other delivery back to its partition in order. It
// reports, as the root's subscriptions do, whether the consumer should
// subscribe again (takeCtx ended) and what ended it otherwise. A Run
// serves once: each subscription has its own.
func (o *Run) Serve(takeCtx, handlerCtx context.Context, probe int, stopTaking context.CancelFunc) (more bool, err error) {
	if o.cfg.HandOver == nil {
		return false, fmt.Errorf("ordered queue %q: the transport %T cannot hand a queue over (transport.HandOverConsumer)", o.cfg.Queue, o.cfg.T)
	}
	sp, err := NewSpreader(o.cfg.Broker, o.cfg.Queue, o.cfg.Partitions, 0)
	if err != nil {
		return false, err
	}
	runCtx, cancel := context.WithCancelCause(takeCtx)
	defer cancel(nil)
	o.handlerCtx, o.runCtx, o.probe, o.stopTaking = handlerCtx, runCtx, probe, stopTaking
	sp.OnLost = o.loseAll
	o.fail = func(err error) { cancel(err) }

	workers := o.cfg.Concurrency
	if probe > 0 {
		workers = min(workers, probe)
	}
	for range workers {
		o.workers.Go(o.work)
	}
	o.watch.Go(func() { o.reportStatus(runCtx) })
	if lv := o.cfg.Liveness; lv != nil {
		o.watch.Go(func() { o.watchdog(runCtx, lv) })
	}
	serr := sp.Run(runCtx, o.spread)
	cancel(nil)
	o.watch.Wait()
	o.spread(nil)
	o.parts.Wait()
	o.mu.Lock()
	o.closed = true
	o.cond.Broadcast()
	o.mu.Unlock()
	o.workers.Wait()

	if cause := context.Cause(runCtx); cause != nil && cause != context.Canceled && takeCtx.Err() == nil {
		return false, cause
	}
	if serr != nil && takeCtx.Err() == nil {
		return false, serr
	}
	return takeCtx.Err() != nil, nil
}

// BlockedKeys is the number of blocked keys in the partitions held now
// (acemq.consumer.blocked_keys).
func (o *Run) BlockedKeys() int { return o.reg.Count(o.holds) }

// spread is the spreader's onChange: it subscribes to the partitions newly
// held and stops those given up.
func (o *Run) spread(held []int) {
	o.mu.Lock()
	var stop []*partition
	for i, p := range o.held {
		if !slices.Contains(held, i) {
			stop = append(stop, p)
			delete(o.held, i)
		}
	}
	var start []*partition
	for _, i := range held {
		if _, ok := o.held[i]; ok || o.runCtx.Err() != nil {
			continue
		}
		ctx, cancel := context.WithCancel(o.runCtx)
		p := &partition{i: i, ctx: ctx, cancel: cancel}
		o.held[i] = p
		start = append(start, p)
	}
	o.mu.Unlock()
	for _, p := range stop {
		o.stop(p)
	}
	for _, p := range start {
		o.parts.Go(func() { o.consume(p) })
	}
}

// consume runs partition p's subscription until p stops, subscribing
// again after a pause when it was ended to be tried again (refused).
func (o *Run) consume(p *partition) {
	defer o.stop(p)
	q := PartitionQueue(o.cfg.Queue, p.i)
	for {
		sub, cancel := context.WithCancel(p.ctx)
		o.mu.Lock()
		p.sub, p.refused = cancel, false
		o.mu.Unlock()
		err := o.cfg.HandOver.ConsumeHandOver(sub, q, o.cfg.Prefetch, func(d transport.Delivery) {
			o.arrive(p, d)
		})
		cancel()
		o.mu.Lock()
		again, pause := p.refused, p.pauseLocked()
		if o.runCtx.Err() == nil {
			// The subscription is gone: what its handlers do is another
			// holder's to do again.
			o.loseLocked(p)
		}
		o.mu.Unlock()
		p.loaded = false
		if p.ctx.Err() != nil {
			return
		}
		if !again {
			if err != nil {
				o.fail(fmt.Errorf("consuming partition %q: %w", q, err))
			}
			return
		}
		Sleep(p.ctx, pause)
	}
}

// loseLocked, with o.mu held, cancels the context of p's handlers: the
// partition is lost to this instance.
func (o *Run) loseLocked(p *partition) {
	if p.hcancel != nil {
		p.hcancel(ErrLost)
	}
}

// loseAll cancels the handlers of every held partition: the slot's lease
// was lost, so they are another instance's now. (A partition given up by
// a rebalance is not lost: its subscription waits for its running
// handlers to settle before the next holder gets anything.)
func (o *Run) loseAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range o.held {
		o.loseLocked(p)
	}
}

// refuseLocked, with o.mu held, ends p's current subscription so that it
// is tried again, after a pause that grows with the refusals in a row
// (pauseLocked): its deliveries go back to the broker. It reports whether
// this is the first refusal of a row.
func (o *Run) refuseLocked(p *partition) (first bool) {
	now := time.Now()
	if p.refusals == 0 || now.Sub(p.refusedAt) > refusalMemory {
		p.refusals = 0
	}
	p.refusals++
	p.refusedAt = now
	p.refused = true
	if p.sub != nil {
		p.sub()
	}
	return p.refusals == 1
}

// pauseLocked, with o.mu held, is the pause before p is subscribed again
// after a refusal: minPause after the first of a row, doubling with each
// one more, up to maxPause.
func (p *partition) pauseLocked() time.Duration {
	return min(minPause<<min(max(p.refusals-1, 0), 16), maxPause)
}

// takeFence takes a fencing token for p's current channel and gives its
// handlers a new context. When it fails, p's subscription ends and is
// tried again: no delivery is handled without its fence.
func (o *Run) takeFence(p *partition) bool {
	var n uint64
	if o.cfg.Fencer != nil {
		var err error
		n, err = o.cfg.Fencer.Fence(p.ctx, FenceCounter(o.cfg.Queue))
		if err != nil {
			if p.ctx.Err() == nil && !closed(o.cfg.T) {
				o.cfg.logger().Warn("acemq: taking a partition's fencing token failed; its subscription is tried again",
					"queue", o.cfg.Queue, "partition", p.i, "error", err)
			}
			o.mu.Lock()
			o.refuseLocked(p)
			o.mu.Unlock()
			return false
		}
	}
	hctx, cancel := context.WithCancelCause(o.handlerCtx)
	o.mu.Lock()
	o.loseLocked(p)
	p.fence, p.hctx, p.hcancel = n, hctx, cancel
	o.mu.Unlock()
	return true
}

// silent reports whether the broker has not been heard within its
// heartbeat timeout: it may have taken this instance for dead and handed
// its partitions on.
func (o *Run) silent() bool {
	lv := o.cfg.Liveness
	if lv == nil {
		return false
	}
	t := lv.Timeout()
	return t > 0 && time.Since(lv.LastHeard()) > t
}

// watchdog checks the transport's liveness about every quarter of its
// timeout and, once the broker has been silent too long, cuts off every
// held partition (cutOff).
func (o *Run) watchdog(ctx context.Context, lv transport.Liveness) {
	for {
		every := lv.Timeout() / 4
		if every <= 0 {
			every = time.Second
		}
		every = max(every, 10*time.Millisecond)
		Sleep(ctx, every)
		if ctx.Err() != nil {
			return
		}
		if o.silent() {
			o.cutOff()
		}
	}
}

// cutOff treats every held partition as lost: its handlers' contexts are
// cancelled and its subscription ends, to be taken again (with a new
// fence) once the broker answers.
func (o *Run) cutOff() {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, p := range o.held {
		if p.refused || p.hctx == nil || p.hctx.Err() != nil {
			continue
		}
		o.loseLocked(p)
		o.refuseLocked(p)
		n++
	}
	if n > 0 {
		o.cfg.logger().Warn("acemq: the broker was not heard within the heartbeat timeout; the ordered queue's handlers are cancelled and its partitions taken again",
			"queue", o.cfg.Queue, "partitions", n, "timeout", o.cfg.Liveness.Timeout())
	}
}

// holds reports whether the run holds partition i now.
func (o *Run) holds(i int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.held[i]
	return ok
}

// Held returns the partitions held now, in order (Partitions).
func (o *Run) Held() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.held))
}

// arrive takes a delivery of partition p into its key's lane. The first
// delivery of a subscription reads the blocked-key registry first, since
// the holder before may have blocked keys of the partition.
func (o *Run) arrive(p *partition, d transport.Delivery) {
	if p.acker != nil && d.Acker != p.acker {
		// The transport resumed the subscription on a new channel: what
		// the old one handed out comes again, and another instance may
		// have held the partition in between.
		o.dropStale(p, p.acker)
		p.loaded = false
	}
	p.acker = d.Acker
	if o.silent() {
		o.cutOff()
	}
	o.mu.Lock()
	refused := p.refused
	o.mu.Unlock()
	if refused {
		_ = d.Release()
		return
	}
	if !p.loaded {
		if !o.loadRegistry(p) || !o.takeFence(p) {
			_ = d.Release()
			return
		}
		p.loaded = true
	}
	it := &Attempt{run: o, d: d, p: p, key: KeyOf(d.Headers)}
	o.mu.Lock()
	it.fence, it.hctx = p.fence, p.hctx
	if p.stopped || p.refused {
		o.mu.Unlock()
		_ = d.Release()
		return
	}
	if it.key == "" {
		o.pushLocked(it)
	} else if l := o.lanes[it.key]; l != nil {
		l.items = append(l.items, it)
	} else {
		o.lanes[it.key] = &lane{items: []*Attempt{it}}
		o.pushLocked(it)
	}
	o.mu.Unlock()
}

// dropStale forgets the deliveries of partition p that came on the channel
// of acker, now gone: the broker delivers them again, in order, on the new
// one. A running one finishes (its ack fails); the key's next delivery
// waits for it, so no two of a key run here at once.
func (o *Run) dropStale(p *partition, acker transport.Acknowledger) {
	o.mu.Lock()
	defer o.mu.Unlock()
	gone := func(it *Attempt) bool { return it.p == p && it.d.Acker == acker }
	o.loseLocked(p)
	o.ready = slices.DeleteFunc(o.ready, func(it *Attempt) bool {
		if gone(it) {
			it.stale = true
			return true
		}
		return false
	})
	for key, l := range o.lanes {
		l.items = slices.DeleteFunc(l.items, func(it *Attempt) bool {
			if !gone(it) {
				return false
			}
			it.stale = true
			switch it.state {
			case itemRunning:
				return false
			case itemWaiting:
				return it.timer.Stop() // else its timer drops it
			}
			return true
		})
		if len(l.items) == 0 {
			delete(o.lanes, key)
		} else if head := l.items[0]; head.state == itemQueued {
			o.pushLocked(head)
		}
	}
	o.cfg.logger().Warn("acemq: a partition's channel was replaced; its deliveries not yet handled come again",
		"queue", o.cfg.Queue, "partition", p.i)
}

// loadRegistry reads the registry for partition p, trying again while the
// broker fails, until it has it or p stops.
func (o *Run) loadRegistry(p *partition) bool {
	for pause := minPause; ; pause = min(2*pause, maxPause) {
		err := o.reg.Load(p.ctx)
		if err == nil {
			return true
		}
		if p.ctx.Err() != nil || closed(o.cfg.T) {
			return false
		}
		o.cfg.logger().Warn("acemq: reading the blocked keys failed; the partition waits",
			"queue", o.cfg.Queue, "partition", p.i, "retry_in", pause, "error", err)
		Sleep(p.ctx, pause)
	}
}

func (o *Run) pushLocked(it *Attempt) {
	it.state = itemReady
	o.ready = append(o.ready, it)
	o.cond.Signal()
}

// stop stops partition p: nothing more starts of it, its queued and
// waiting deliveries are given back (Release: they return, in order, when
// the subscription's channel closes), the running ones settle.
func (o *Run) stop(p *partition) {
	o.mu.Lock()
	if p.stopped {
		o.mu.Unlock()
		return
	}
	p.stopped = true
	p.cancel()
	var back []*Attempt
	o.ready = slices.DeleteFunc(o.ready, func(it *Attempt) bool {
		if it.p == p {
			back = append(back, it)
			return true
		}
		return false
	})
	for key, l := range o.lanes {
		l.items = slices.DeleteFunc(l.items, func(it *Attempt) bool {
			switch {
			case it.p != p || it.state == itemRunning:
				return false
			case it.state == itemWaiting:
				if !it.timer.Stop() {
					return false // firing: its timer gives it back
				}
				back = append(back, it)
				return true
			case it.state == itemQueued:
				back = append(back, it)
				return true
			}
			return true // ready: given back above
		})
		if len(l.items) == 0 {
			delete(o.lanes, key)
		}
	}
	o.mu.Unlock()
	for _, it := range back {
		_ = it.d.Release()
	}
}

// work is a worker: it starts ready deliveries until the run closes, and
// none once the subscription stopped taking or the handlers' context ended
// (Conn.Close): those it gives back.
func (o *Run) work() {
	for {
		o.mu.Lock()
		for len(o.ready) == 0 && !o.closed {
			o.cond.Wait()
		}
		if len(o.ready) == 0 {
			o.mu.Unlock()
			return
		}
		it := o.ready[0]
		o.ready[0] = nil
		o.ready = o.ready[1:]
		it.state = itemRunning
		if o.handlerCtx.Err() != nil || o.runCtx.Err() != nil {
			// The subscription stopped taking (Run's ctx, a pause) or the
			// Conn closes: nothing more starts. The delivery goes back, as
			// stop gives back the rest of its partition.
			o.mu.Unlock()
			o.giveBack(it)
			o.finish(it)
			continue
		}
		o.started++
		endProbe := o.probe > 0 && o.started == o.probe
		o.mu.Unlock()
		if endProbe {
			o.stopTaking() // a probe is this many deliveries
		}
		o.run(it)
	}
}

// run handles one delivery at the head of its lane: a release of its key,
// a delivery of a blocked key (held), or one to handle. A delivery asking
// for another attempt keeps its lane until the attempt.
func (o *Run) run(it *Attempt) {
	ctx := it.hctx
	if ctx == nil {
		ctx = o.handlerCtx
	}
	if errors.Is(context.Cause(ctx), ErrLost) {
		o.giveBack(it) // the partition's holder now handles it
		o.finish(it)
		return
	}
	switch {
	case isControl(it.d.Headers):
		o.releaseKey(ctx, it)
	case it.key != "" && o.cfg.BlockOnFailure && o.reg.IsBlocked(it.key):
		o.hold(ctx, it)
	default:
		if retry, wait := o.host.Handle(ctx, it); retry {
			o.waitInPlace(it, wait)
			return
		}
	}
	o.finish(it)
}

// waitInPlace arms the timer of it's next attempt; its key waits, the
// workers go on.
func (o *Run) waitInPlace(it *Attempt, wait time.Duration) {
	o.mu.Lock()
	if o.leaveIfGoneLocked(it) {
		return
	}
	defer o.mu.Unlock()
	it.state = itemWaiting
	it.timer = time.AfterFunc(wait, func() {
		o.mu.Lock()
		if o.leaveIfGoneLocked(it) {
			return
		}
		o.pushLocked(it)
		o.mu.Unlock()
	})
}

// leaveIfGoneLocked, called with o.mu held, takes it out of its lane when
// its partition stopped (it is given back) or its channel went (the broker
// delivers it again) and then reports true, having unlocked o.mu; else it
// reports false with o.mu still held.
func (o *Run) leaveIfGoneLocked(it *Attempt) bool {
	if !it.p.stopped && !it.stale {
		return false
	}
	stale := it.stale
	o.removeLocked(it)
	o.mu.Unlock()
	if !stale {
		_ = it.d.Release()
	}
	return true
}

// finish ends it in its lane and readies the key's next delivery.
func (o *Run) finish(it *Attempt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.removeLocked(it)
}

func (o *Run) removeLocked(it *Attempt) {
	if it.key == "" {
		return
	}
	l := o.lanes[it.key]
	if l == nil {
		return
	}
	l.items = slices.DeleteFunc(l.items, func(x *Attempt) bool { return x == it })
	if len(l.items) == 0 {
		delete(o.lanes, it.key)
		return
	}
	if next := l.items[0]; next.state == itemQueued {
		o.pushLocked(next)
	}
}

// stopped reports whether it's partition has stopped.
func (o *Run) stopped(p *partition) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return p.stopped
}

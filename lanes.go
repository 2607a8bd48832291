package acemq

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/acemq/acemq/transport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// orderedRun is one subscription of an ordered engine: the partitions the
// spreader gave it, each consumed with ConsumeHandOver, and the lanes that
// keep the messages of one key one at a time. Every field below mu is
// guarded by it.
type orderedRun struct {
	e          *engine
	handlerCtx context.Context // ends only when the Conn closes
	runCtx     context.Context // ends when the subscription stops taking
	fail       func(error)     // ends the subscription with an error (no prefix: engine.run adds it)
	probe      bool
	stopTaking context.CancelFunc
	reg        *registry
	parts      sync.WaitGroup // the partitions' ConsumeHandOver calls
	workers    sync.WaitGroup

	mu      sync.Mutex
	cond    sync.Cond
	held    map[int]*partition
	lanes   map[string]*lane
	ready   []*item // lane heads and keyless deliveries, to start in this order
	closed  bool    // the workers end once ready is empty
	started int     // deliveries started, for a probe
}

// partition is one subscription to a partition queue.
type partition struct {
	i       int
	ctx     context.Context
	cancel  context.CancelFunc
	stopped bool // guarded by orderedRun.mu
	// Its Consume goroutine's: the registry was read after the first
	// delivery of the current channel, and that channel's acknowledger.
	loaded bool
	acker  transport.Acknowledger
}

// itemState is where a delivery is in its lane.
type itemState int

const (
	itemQueued  itemState = iota // behind its key's running delivery
	itemReady                    // in ready, to be started
	itemRunning                  // on a worker
	itemWaiting                  // waiting for an attempt in place
)

// item is one delivery of a partition and what its attempts so far left.
type item struct {
	d        transport.Delivery
	p        *partition
	key      string
	state    itemState
	attempt  int           // the attempt to run next, after a retry in place; 0 before one
	lastErr  string        // the reason of the attempt before
	waited   time.Duration // the delays waited in place so far
	timer    *time.Timer
	blocked  bool // its failure blocked its key
	fromHeld bool // taken from its key's held queue by a release
	stale    bool // its channel is gone (the broker delivers it again); guarded by orderedRun.mu
}

// lane is the deliveries of one key, the running (or waiting) one first.
type lane struct{ items []*item }

// subscribeOrdered runs one subscription of an ordered engine: the
// spreader says which partitions to hold; each held partition is consumed
// and its deliveries go through the lanes to Concurrency workers (fewer in
// a probe, which starts only probeDeliveries of them). When takeCtx ends it
// starts nothing more, lets the running handlers settle and gives every
// other delivery back to its partition in order.
func (e *engine) subscribeOrdered(takeCtx, handlerCtx context.Context, m mode, stopTaking context.CancelFunc) (more bool, err error) {
	sp, err := newSpreader(e.conn.t, e.queue, e.cfg.order.Partitions, e.cfg.quorum, e.conn.cfg.logger)
	if err != nil {
		return false, err
	}
	runCtx, cancel := context.WithCancelCause(takeCtx)
	defer cancel(nil)
	o := &orderedRun{
		e: e, handlerCtx: handlerCtx, runCtx: runCtx, probe: m == modeProbe, stopTaking: stopTaking,
		fail:  func(err error) { cancel(err) },
		reg:   newRegistry(e.conn, e.queue, e.cfg.quorum),
		held:  make(map[int]*partition),
		lanes: make(map[string]*lane),
	}
	o.cond.L = &o.mu
	e.ordered.Store(o)
	defer e.ordered.Store(nil)
	if reg, err := e.observeBlocked(o); err == nil {
		defer func() { _ = reg.Unregister() }()
	}

	workers := e.cfg.concurrency
	if o.probe {
		workers = min(workers, probeDeliveries)
	}
	for range workers {
		o.workers.Go(o.work)
	}
	serr := sp.run(runCtx, o.spread)
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

// observeBlocked reports acemq.consumer.blocked_keys for the partitions o
// holds while it runs.
func (e *engine) observeBlocked(o *orderedRun) (metric.Registration, error) {
	in := e.conn.metrics
	set := metric.WithAttributeSet(attribute.NewSet(attrSystem.String("rabbitmq"), attrDestination.String(e.queue)))
	return in.meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		ob.ObserveInt64(in.blockedKeys, int64(o.reg.count(o.holds)), set)
		return nil
	}, in.blockedKeys)
}

// spread is the spreader's onChange: it subscribes to the partitions newly
// held and stops those given up.
func (o *orderedRun) spread(held []int) {
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
	ho := o.e.conn.t.(transport.HandOverConsumer)
	for _, p := range start {
		o.parts.Go(func() {
			defer o.stop(p)
			err := ho.ConsumeHandOver(p.ctx, PartitionQueue(o.e.queue, p.i), o.e.cfg.prefetch, func(d transport.Delivery) {
				o.arrive(p, d)
			})
			if err != nil && p.ctx.Err() == nil {
				o.fail(fmt.Errorf("consuming partition %q: %w", PartitionQueue(o.e.queue, p.i), err))
			}
		})
	}
}

// holds reports whether the run holds partition i now.
func (o *orderedRun) holds(i int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.held[i]
	return ok
}

// heldNow is Partitions: the held partitions, in order.
func (o *orderedRun) heldNow() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.held))
}

// arrive takes a delivery of partition p into its key's lane. The first
// delivery of a subscription reads the blocked-key registry first, since
// the holder before may have blocked keys of the partition.
func (o *orderedRun) arrive(p *partition, d transport.Delivery) {
	if p.acker != nil && d.Acker != p.acker {
		// The transport resumed the subscription on a new channel: what
		// the old one handed out comes again, and another instance may
		// have held the partition in between.
		o.dropStale(p, p.acker)
		p.loaded = false
	}
	p.acker = d.Acker
	if !p.loaded {
		if !o.loadRegistry(p) {
			_ = d.Release()
			return
		}
		p.loaded = true
	}
	it := &item{d: d, p: p, key: keyOf(d.Headers)}
	o.mu.Lock()
	if p.stopped {
		o.mu.Unlock()
		_ = d.Release()
		return
	}
	if it.key == "" {
		o.pushLocked(it)
	} else if l := o.lanes[it.key]; l != nil {
		l.items = append(l.items, it)
	} else {
		o.lanes[it.key] = &lane{items: []*item{it}}
		o.pushLocked(it)
	}
	o.mu.Unlock()
}

// dropStale forgets the deliveries of partition p that came on the channel
// of acker, now gone: the broker delivers them again, in order, on the new
// one. A running one finishes (its ack fails); the key's next delivery
// waits for it, so no two of a key run here at once.
func (o *orderedRun) dropStale(p *partition, acker transport.Acknowledger) {
	o.mu.Lock()
	defer o.mu.Unlock()
	gone := func(it *item) bool { return it.p == p && it.d.Acker == acker }
	o.ready = slices.DeleteFunc(o.ready, func(it *item) bool {
		if gone(it) {
			it.stale = true
			return true
		}
		return false
	})
	for key, l := range o.lanes {
		l.items = slices.DeleteFunc(l.items, func(it *item) bool {
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
	o.e.conn.cfg.logger.Warn("acemq: a partition's channel was replaced; its deliveries not yet handled come again",
		"queue", o.e.queue, "partition", p.i)
}

// loadRegistry reads the registry for partition p, trying again while the
// broker fails, until it has it or p stops.
func (o *orderedRun) loadRegistry(p *partition) bool {
	for pause := minMovePause; ; pause = min(2*pause, maxMovePause) {
		err := o.reg.load(p.ctx)
		if err == nil {
			return true
		}
		if p.ctx.Err() != nil {
			return false
		}
		o.e.conn.cfg.logger.Warn("acemq: reading the blocked keys failed; the partition waits",
			"queue", o.e.queue, "partition", p.i, "retry_in", pause, "error", err)
		sleepCtx(p.ctx, pause)
	}
}

func (o *orderedRun) pushLocked(it *item) {
	it.state = itemReady
	o.ready = append(o.ready, it)
	o.cond.Signal()
}

// stop stops partition p: nothing more starts of it, its queued and
// waiting deliveries are given back (Release: they return, in order, when
// the subscription's channel closes), the running ones settle.
func (o *orderedRun) stop(p *partition) {
	o.mu.Lock()
	if p.stopped {
		o.mu.Unlock()
		return
	}
	p.stopped = true
	p.cancel()
	var back []*item
	o.ready = slices.DeleteFunc(o.ready, func(it *item) bool {
		if it.p == p {
			back = append(back, it)
			return true
		}
		return false
	})
	for key, l := range o.lanes {
		l.items = slices.DeleteFunc(l.items, func(it *item) bool {
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

// work is a worker: it starts ready deliveries until the run closes.
func (o *orderedRun) work() {
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
		o.started++
		endProbe := o.probe && o.started == probeDeliveries
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
func (o *orderedRun) run(it *item) {
	ctx := o.handlerCtx
	switch {
	case isControl(it.d.Headers):
		o.releaseKey(ctx, it)
	case it.key != "" && o.e.cfg.order.BlockOnFailure && o.reg.isBlocked(it.key):
		o.hold(ctx, it)
	default:
		if retry, wait := o.handle(ctx, it, it.d); retry {
			o.waitInPlace(it, wait)
			return
		}
	}
	o.finish(it)
}

// waitInPlace arms the timer of it's next attempt; its key waits, the
// workers go on.
func (o *orderedRun) waitInPlace(it *item, wait time.Duration) {
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
func (o *orderedRun) leaveIfGoneLocked(it *item) bool {
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
func (o *orderedRun) finish(it *item) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.removeLocked(it)
}

func (o *orderedRun) removeLocked(it *item) {
	if it.key == "" {
		return
	}
	l := o.lanes[it.key]
	if l == nil {
		return
	}
	l.items = slices.DeleteFunc(l.items, func(x *item) bool { return x == it })
	if len(l.items) == 0 {
		delete(o.lanes, it.key)
		return
	}
	if next := l.items[0]; next.state == itemQueued {
		o.pushLocked(next)
	}
}

// stopped reports whether it's partition has stopped.
func (o *orderedRun) stopped(p *partition) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return p.stopped
}

// isControl reports whether a delivery is a control message (a release).
func isControl(h map[string]any) bool {
	_, ok := h[hdrControl]
	return ok
}

package acemq

import (
	"context"
	"fmt"
	"time"

	"github.com/acemq/acemq/transport"
)

// handle takes one attempt of a delivery of an ordered engine from parse to
// settlement, as engine.process does for any consumer (the consume chain,
// the checks, the route, the settlement), with two differences: a retry
// happens in place (handle reports it, with the wait, and moves nothing),
// and with BlockOnFailure a delivery that fails for good blocks its key
// before it is moved. d is it's delivery, or one drained from the held
// queue of its key.
func (o *orderedRun) handle(ctx context.Context, it *item, d transport.Delivery) (retry bool, wait time.Duration) {
	e := o.e
	env, perr := parseEnvelope(&d.Message)
	if it.attempt > 0 {
		env.Attempt, env.Error = it.attempt, it.lastErr
	}
	ds := &delivery{Context: ctx, env: env}
	r, v := e.screen(ds, d, perr)
	if r == nil {
		return o.settle(ds, it, d, ds, v, -1)
	}
	v, seconds := r.serve(ds, e, d, ds.env)
	return o.settle(ds, it, d, ds, v, seconds)
}

// settle carries out a verdict of an ordered engine. A retry is recorded
// and reported back (the delivery stays unacked, its key waits); the
// total wait in place is kept under the broker's delivery timeout. Any
// other failure blocks the key first, with BlockOnFailure, then moves the
// message as engine.settle does. A move that fails is tried again, never
// nacked back to the queue (that would put it behind the key's next
// messages), until it works or the partition stops, when the delivery is
// given back.
func (o *orderedRun) settle(ctx context.Context, it *item, d transport.Delivery, ds *delivery, v verdict, handlerSeconds float64) (retry bool, wait time.Duration) {
	e := o.e
	env := ds.env
	v.reason = clipReason(v.reason)
	if v.outcome == OutcomeRetried {
		v.delay = min(v.delay, max(maxInPlaceDelay-it.waited, 0))
	}
	s := Settlement{
		Queue: e.queue, Envelope: env, Outcome: v.outcome, Reason: v.reason,
		Delay: v.delay, Attempt: env.Attempt, Ack: v.ack,
	}
	switch v.outcome {
	case OutcomeRetried:
		it.attempt, it.lastErr, it.waited = env.Attempt+1, v.reason, it.waited+v.delay
	case OutcomeAcked:
		if err := d.Ack(); err != nil {
			e.conn.cfg.logger.Warn("acemq: acking a delivery failed; the broker will deliver it again",
				"queue", e.queue, "id", env.ID, "error", err)
		}
	default:
		if o.e.cfg.order.BlockOnFailure && it.key != "" {
			if !o.retrying(ctx, it, "blocking its key", func() error {
				return o.reg.block(ctx, it.key, env.ID, v.reason, it.p.i)
			}) {
				o.giveBack(ctx, it, d, ds, s, v)
				return false, 0
			}
			it.blocked = true
		}
		if !o.retrying(ctx, it, "moving it to "+e.target(v), func() error { return e.move(ctx, d, env, v) }) {
			o.giveBack(ctx, it, d, ds, s, v)
			return false, 0
		}
		e.moveBackoff(false)
	}
	e.conn.metrics.settled(ctx, e.queue, s.Outcome, handlerSeconds)
	e.observe(v.failed, handlerSeconds >= 0)
	e.runCallbacks(ctx, ds, s, true)
	return v.outcome == OutcomeRetried, v.delay
}

// retrying runs step until it works, pausing between failures as a failed
// move does, and reports false when it's partition stopped (or the Conn
// closed) first.
func (o *orderedRun) retrying(ctx context.Context, it *item, what string, step func() error) bool {
	for {
		err := step()
		if err == nil {
			return true
		}
		pause := o.e.moveBackoff(true)
		o.e.conn.cfg.logger.Warn("acemq: settling a delivery of an ordered queue failed; trying again",
			"queue", o.e.queue, "partition", it.p.i, "step", what, "retry_in", pause, "error", err)
		if o.stopped(it.p) || ctx.Err() != nil {
			return false
		}
		sleepCtx(it.p.ctx, pause)
		if o.stopped(it.p) || ctx.Err() != nil {
			return false
		}
	}
}

// giveBack returns a delivery whose settlement could not be carried out
// to the broker unsettled (a partition's delivery comes back when the
// channel closes, in order; a held one goes back to its held queue), and
// tells the callbacks, as engine.settle does after a failed move.
func (o *orderedRun) giveBack(ctx context.Context, it *item, d transport.Delivery, ds *delivery, s Settlement, v verdict) {
	if it.fromHeld {
		_ = d.Nack(true)
	} else {
		_ = d.Release()
	}
	s.Outcome = ""
	s.Reason = fmt.Sprintf("the move to %s failed, so the delivery went back to its queue unsettled", o.e.target(v))
	o.e.runCallbacks(ctx, ds, s, false)
}

// hold moves a delivery of a blocked key to the key's held queue (declared
// on first use), confirmed before the ack, as it arrived.
func (o *orderedRun) hold(ctx context.Context, it *item) {
	q := heldQueue(o.e.queue, it.key)
	msg := it.d.Message
	msg.Exchange, msg.RoutingKey = "", q
	ok := o.retrying(ctx, it, "holding it in "+q, func() error {
		if err := o.reg.declareHeld(ctx, it.key); err != nil {
			return err
		}
		ackErr, err := o.e.conn.relocate(ctx, msg, &it.d)
		if ackErr != nil {
			o.e.conn.cfg.logger.Warn("acemq: acking a held delivery failed; the broker will deliver it again",
				"queue", o.e.queue, "id", it.d.MessageID, "error", ackErr)
		}
		return err
	})
	if !ok {
		_ = it.d.Release()
		return
	}
	o.e.moveBackoff(false)
}

// releaseKey carries out a release of it's key: the held messages are
// handled in order (each as usual, retries in place included), the held
// queue deleted, the marker removed, and the control message acked last.
// A held message that fails for good blocks the key again and ends the
// release. When the partition stops first, the control message goes back
// and the next holder goes on where this one stopped.
func (o *orderedRun) releaseKey(ctx context.Context, it *item) {
	e := o.e
	if !e.cfg.order.BlockOnFailure || it.key == "" || !o.reg.isBlocked(it.key) {
		o.ackControl(it) // nothing blocked here: a release repeated, or for another consumer
		return
	}
	q := heldQueue(e.queue, it.key)
	drained := 0
	for {
		if o.stopped(it.p) {
			_ = it.d.Release()
			return
		}
		d, ok, err := e.conn.t.Get(ctx, q)
		if err != nil && !isNotFound(err) {
			if !o.retrying(ctx, it, "reading "+q, func() error { return err }) {
				_ = it.d.Release()
				return
			}
			continue
		}
		if !ok {
			break
		}
		sub := &item{d: d, p: it.p, key: it.key, fromHeld: true}
		for {
			retry, wait := o.handle(ctx, sub, d)
			if !retry {
				break
			}
			sleepCtx(it.p.ctx, wait)
			if o.stopped(it.p) {
				_ = d.Nack(true)
				_ = it.d.Release()
				return
			}
		}
		if sub.blocked {
			e.conn.cfg.logger.Warn("acemq: a held message failed for good; its key is blocked again",
				"queue", e.queue, "key", it.key, "id", d.MessageID, "released", drained)
			o.ackControl(it)
			return
		}
		drained++
	}
	if !o.retrying(ctx, it, "unblocking the key", func() error {
		if err := e.conn.t.DeleteQueue(ctx, q); err != nil {
			return err
		}
		return o.reg.unblock(ctx, it.key)
	}) {
		_ = it.d.Release()
		return
	}
	e.conn.cfg.logger.Info("acemq: a blocked key was released", "queue", e.queue, "key", it.key, "handled", drained)
	o.ackControl(it)
}

// ackControl acks a release's control message, logging a failure: the
// broker delivers it again, and a release of a key no longer blocked is
// acked at once.
func (o *orderedRun) ackControl(it *item) {
	if err := it.d.Ack(); err != nil {
		o.e.conn.cfg.logger.Warn("acemq: acking a release of a key failed; the broker will deliver it again",
			"queue", o.e.queue, "key", it.key, "error", err)
	}
}

package ordering

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/acemq/acemq/transport"
)

// MaxInPlaceDelay is RabbitMQ's delivery timeout (consumer_timeout) as
// older 3.x releases set it: a delivery unacked for longer closes its
// channel, so the waits of an ordered delivery's retries in place must stay
// under it.
const MaxInPlaceDelay = 15 * time.Minute

// Delivery is the attempt's delivery: from its partition, or from its
// key's held queue during a release.
func (a *Attempt) Delivery() transport.Delivery { return a.d }

// Number is the attempt to run, after a retry in place; 0 before any
// (the envelope's own attempt count holds).
func (a *Attempt) Number() int { return a.attempt }

// LastErr is the reason of the attempt before, after a retry in place.
func (a *Attempt) LastErr() string { return a.lastErr }

// Partition is the partition the delivery came from.
func (a *Attempt) Partition() int { return a.p.i }

// Fence is the fencing token of the delivery's channel: taken
// (transport.Fencer) when this instance became the partition's active
// consumer, before any handler of that channel ran; 0 without a Fencer.
func (a *Attempt) Fence() uint64 { return a.fence }

// Lost reports whether the delivery's partition was lost to this
// instance since the delivery came: its handler's context ended with
// ErrLost. It changes nothing; Yield acts on it.
func (a *Attempt) Lost() bool {
	return a.hctx != nil && errors.Is(context.Cause(a.hctx), ErrLost)
}

// Yield is the one place that decides whether the attempt goes back to the
// broker unsettled, whatever its handler asked, because another holder
// handles it: its partition was lost to this instance (or the broker has
// not been heard within its heartbeat timeout, which cuts every partition
// off first), or err, what the handler answered (nil before it ran), says
// that a store refused a write for a stale fencing token (it wraps
// ErrLost). Such an attempt is given back and Yield reports true.
//
// A store's refusal while this instance still holds the partition (a
// store ahead of the broker's tokens, or one that refuses token 0) takes
// the partition again: its handlers are cancelled and its subscription
// ends, to be taken again with a new token after a pause that doubles
// with each refusal in a row, up to maxPause; the first of a row is
// logged at Warn. So a refusal that never ends costs one attempt every
// maxPause, never a loop.
func (a *Attempt) Yield(ctx context.Context, err error) bool {
	o := a.run
	if o.silent() {
		o.cutOff()
	}
	fenced := errors.Is(err, ErrLost)
	if !fenced && !a.Lost() {
		return false
	}
	if fenced {
		o.fenced(ctx, a, err)
	}
	a.yielded = true
	o.giveBack(a)
	return true
}

// fenced takes a's partition again after a store refused a's write for
// its fencing token, unless the partition was lost meanwhile or its
// channel changed (its subscription is ending already).
func (o *Run) fenced(ctx context.Context, a *Attempt, err error) {
	o.mu.Lock()
	p := a.p
	if a.hctx == nil || p.hctx != a.hctx || p.stopped || a.Lost() {
		o.mu.Unlock()
		return
	}
	o.loseLocked(p)
	first := o.refuseLocked(p)
	pause := p.pauseLocked()
	o.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn
	}
	o.cfg.logger().Log(ctx, level, "acemq: a handler's write was refused for its fencing token while this instance holds the partition; the partition is taken again with a new token, and each refusal in a row waits longer",
		"queue", o.cfg.Queue, "partition", p.i, "fence", a.fence, "id", a.d.MessageID, "retry_in", pause, "error", err)
}

// Yielded reports whether Yield gave the attempt back.
func (a *Attempt) Yielded() bool { return a.yielded }

// InPlace records a retry in place: the next attempt is number next, after
// an attempt that failed for reason. It returns the wait before it, delay
// cut so that the waits in place stay under MaxInPlaceDelay in all.
func (a *Attempt) InPlace(next int, reason string, delay time.Duration) time.Duration {
	delay = min(delay, max(MaxInPlaceDelay-a.waited, 0))
	a.attempt, a.lastErr, a.waited = next, reason, a.waited+delay
	return delay
}

// Fail carries out a failure for good of message id: with BlockOnFailure
// it blocks the delivery's key first (recording reason), then runs move,
// each step tried until it works. When the partition stops (or ctx ends)
// first, the delivery is given back to the broker unsettled and Fail
// returns the error of the step that last failed; what is the move, for
// the log.
func (a *Attempt) Fail(ctx context.Context, id, reason, what string, move func() error) error {
	o := a.run
	if o.cfg.BlockOnFailure && a.key != "" {
		if err := o.retrying(ctx, a, "blocking its key", func() error {
			return o.reg.block(ctx, a.key, id, reason, a.p.i)
		}); err != nil {
			o.giveBack(a)
			return err
		}
		a.blocked = true
	}
	if err := o.retrying(ctx, a, what, move); err != nil {
		o.giveBack(a)
		return err
	}
	return nil
}

// retrying runs step until it works, pausing between failures as the
// host's failed moves do, and returns the last error when it's partition
// stopped (or the Conn closed) first; nil once step worked.
func (o *Run) retrying(ctx context.Context, it *Attempt, what string, step func() error) error {
	for {
		err := step()
		if err == nil {
			return nil
		}
		pause := o.host.Backoff(true)
		level := slog.LevelWarn
		if ctx.Err() != nil || closed(o.cfg.T) {
			level = slog.LevelDebug // the Conn closes (or the partition was lost): as asked, or said elsewhere
		}
		o.cfg.logger().Log(ctx, level, "acemq: settling a delivery of an ordered queue failed; trying again",
			"queue", o.cfg.Queue, "partition", it.p.i, "step", what, "retry_in", pause, "error", err)
		if o.stopped(it.p) || ctx.Err() != nil {
			return err
		}
		Sleep(it.p.ctx, pause)
		if o.stopped(it.p) || ctx.Err() != nil {
			return err
		}
	}
}

// Sleep waits for d or until ctx ends. It is the one pause of the
// delivery path: the root's failed moves wait with it too.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// sleepBoth waits for d or until either context ends.
func sleepBoth(a, b context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-a.Done():
	case <-b.Done():
	}
}

// giveBack returns a delivery whose settlement could not be carried out
// to the broker unsettled: a partition's delivery comes back when the
// channel closes, in order; a held one goes back to its held queue.
func (o *Run) giveBack(it *Attempt) {
	if it.fromHeld {
		_ = it.d.Nack(true)
	} else {
		_ = it.d.Release()
	}
}

// hold moves a delivery of a blocked key to the key's held queue (declared
// on first use), confirmed before the ack, as it arrived.
func (o *Run) hold(ctx context.Context, it *Attempt) {
	q := HeldQueue(o.cfg.Queue, it.key)
	msg := it.d.Message
	msg.Exchange, msg.RoutingKey = "", q
	err := o.retrying(ctx, it, "holding it in "+q, func() error {
		if err := o.reg.declareHeld(ctx, it.key); err != nil {
			return err
		}
		ackErr, err := o.host.Relocate(ctx, msg, &it.d)
		if ackErr != nil {
			o.cfg.logger().Warn("acemq: acking a held delivery failed; the broker will deliver it again",
				"queue", o.cfg.Queue, "id", it.d.MessageID, "error", ackErr)
		}
		return err
	})
	if err != nil {
		_ = it.d.Release()
		return
	}
	o.host.Backoff(false)
}

// releaseKey carries out a release of it's key. With a re-run, the
// message that blocked the key runs first, from its RerunQueue; once it
// ran, a release without a re-run is sent (confirmed) and this one acked,
// so that the held messages follow under a control message that a cut
// (a Close, a crash) cannot send back to the empty re-run queue. Without
// a re-run, whatever a later re-run put in the RerunQueue runs first, then
// the held messages in order (each as usual, retries in place included);
// then the held and re-run queues are deleted, the marker removed, and the
// control message acked last. A message that fails for good blocks the key
// again (it is the marker then) and ends the release, the rest still held.
// When the partition stops first, the control message goes back and the
// next holder goes on where this one stopped.
func (o *Run) releaseKey(ctx context.Context, it *Attempt) {
	if !o.cfg.BlockOnFailure || it.key == "" || !o.reg.IsBlocked(it.key) {
		o.ackControl(it) // nothing blocked here: a release repeated, or for another consumer
		return
	}
	handled := 0
	rq := RerunQueue(o.cfg.Queue, it.key)
	if id, _ := it.d.Headers[hdrRerun].(string); id != "" {
		if cur := o.reg.markerID(it.key); cur != id {
			// A release asked again after the key was released and
			// blocked anew by another message: not this one's to run.
			o.cfg.logger().Warn("acemq: a release with a re-run names another message than the one that blocked the key; the key stays blocked",
				"queue", o.cfg.Queue, "key", it.key, "rerun", id, "blocked_by", cur)
			o.ackControl(it)
			return
		}
		n, goOn := o.drain(ctx, it, rq)
		if !goOn {
			return
		}
		if n == 0 {
			o.cfg.logger().Warn("acemq: the message to re-run is not in its re-run queue (run already, or purged); the key stays blocked: release it again, with or without a re-run",
				"queue", o.cfg.Queue, "key", it.key, "id", id, "rerun_queue", rq)
			o.ackControl(it)
			return
		}
		// The re-run is done. A release without one takes over for the
		// held messages, confirmed before this one is acked: a release cut
		// short from here on (a Close, a crash, the partition moving) must
		// go on with the held messages, not come back to an empty re-run
		// queue and stop.
		if o.retrying(ctx, it, "handing the release on after its re-run", func() error {
			return o.reg.Release(ctx, it.key, "")
		}) != nil {
			_ = it.d.Release()
			return
		}
		o.cfg.logger().Info("acemq: a blocked key's failed message ran again; its held messages follow",
			"queue", o.cfg.Queue, "key", it.key, "id", id)
		o.ackControl(it)
		return
	} else {
		// A release without a re-run still runs what is in the re-run
		// queue: it is there only because a re-run was asked for (after
		// this release was sent), and deleting it would lose it.
		n, goOn := o.drain(ctx, it, rq)
		if !goOn {
			return
		}
		handled += n
	}
	q := HeldQueue(o.cfg.Queue, it.key)
	n, goOn := o.drain(ctx, it, q)
	if !goOn {
		return
	}
	handled += n
	if o.retrying(ctx, it, "unblocking the key", func() error {
		if err := o.cfg.T.DeleteQueue(ctx, q); err != nil {
			return err
		}
		if err := o.cfg.T.DeleteQueue(ctx, rq); err != nil {
			return err
		}
		return o.reg.unblock(ctx, it.key)
	}) != nil {
		_ = it.d.Release()
		return
	}
	o.cfg.logger().Info("acemq: a blocked key was released", "queue", o.cfg.Queue, "key", it.key, "handled", handled)
	o.ackControl(it)
}

// drain handles the messages of q (a held or re-run queue of it's key) in
// order until q is empty, and returns how many it handled. goOn is false
// when the release ends here: its partition stopped (the control message
// is given back) or a message blocked the key again (it is acked).
func (o *Run) drain(ctx context.Context, it *Attempt, q string) (handled int, goOn bool) {
	for {
		if o.stopped(it.p) || ctx.Err() != nil {
			// The partition stopped, or was lost (ctx is the handlers'
			// of its channel): the next holder releases the key.
			_ = it.d.Release()
			return handled, false
		}
		d, ok, err := o.cfg.T.Get(ctx, q)
		if err != nil && !isNotFound(err) {
			if o.retrying(ctx, it, "reading "+q, func() error { return err }) != nil {
				_ = it.d.Release()
				return handled, false
			}
			continue
		}
		if !ok {
			return handled, true
		}
		// A released message runs under its release's partition channel:
		// its token and its handlers' context, like any other delivery
		// of the partition.
		sub := &Attempt{run: o, d: d, p: it.p, key: it.key, fromHeld: true, fence: it.fence, hctx: it.hctx}
		for {
			retry, wait := o.host.Handle(ctx, sub)
			if !retry {
				break
			}
			sleepBoth(ctx, it.p.ctx, wait)
			if o.stopped(it.p) || ctx.Err() != nil {
				_ = d.Nack(true)
				_ = it.d.Release()
				return handled, false
			}
		}
		if sub.yielded {
			// Given back to q: the partition was lost, or taken again
			// after a fenced write; the release goes on under the next
			// subscription, from where it stopped.
			_ = it.d.Release()
			return handled, false
		}
		if sub.blocked {
			o.cfg.logger().Warn("acemq: a released message failed for good; its key is blocked again",
				"queue", o.cfg.Queue, "key", it.key, "id", d.MessageID, "from", q, "released", handled)
			o.ackControl(it)
			return handled, false
		}
		handled++
	}
}

// ackControl acks a release's control message, logging a failure: the
// broker delivers it again, and a release of a key no longer blocked is
// acked at once.
func (o *Run) ackControl(it *Attempt) {
	if err := it.d.Ack(); err != nil {
		o.cfg.logger().Warn("acemq: acking a release of a key failed; the broker will deliver it again",
			"queue", o.cfg.Queue, "key", it.key, "error", err)
	}
}

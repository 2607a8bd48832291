package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/acemq/acemq/transport"
)

// Transport is one client of a Broker; it implements transport.Transport.
// Its methods are safe for concurrent use. Delivery tags count up from 1 per
// client.
type Transport struct {
	b     *Broker
	acker *acker
	done  chan struct{} // closed by Close

	// Guarded by b.mu.
	closed    bool
	lastTag   uint64
	pending   map[uint64]*entry // handed out, not yet settled, by tag
	consumers map[*consumer]struct{}
}

var _ transport.Transport = (*Transport)(nil)

// acker settles a client's deliveries by tag.
type acker struct{ t *Transport }

// handOverAcker settles the deliveries of a ConsumeHandOver, which may also
// be released.
type handOverAcker struct{ *acker }

var _ transport.Releaser = handOverAcker{}

// Release gives up the delivery tagged tag unsettled: it counts as settled
// for its ConsumeHandOver, and goes back to its queue when that ends.
func (a handOverAcker) Release(tag uint64) error { return a.t.release(tag) }

// Ack settles the delivery tagged tag as handled.
func (a *acker) Ack(tag uint64) error { return a.t.settle(tag, settleAck) }

// Nack settles the delivery tagged tag as not handled, requeueing it or
// dead-lettering it.
func (a *acker) Nack(tag uint64, requeue bool) error {
	if requeue {
		return a.t.settle(tag, settleRequeue)
	}
	return a.t.settle(tag, settleReject)
}

type settlement int

const (
	settleAck settlement = iota
	settleRequeue
	settleReject
)

func (s settlement) String() string {
	switch s {
	case settleAck:
		return "ack"
	case settleRequeue:
		return "nack (requeue)"
	default:
		return "nack"
	}
}

// settle acks or nacks the delivery tagged tag.
func (t *Transport) settle(tag uint64, how settlement) error {
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.closed {
		return closedError(fmt.Sprintf("%s of delivery %d", how, tag))
	}
	e, ok := t.pending[tag]
	if !ok || e.released {
		return fmt.Errorf("memory: %s of delivery %d: no such unsettled delivery on this memory client", how, tag)
	}
	delete(t.pending, tag)
	q, c := e.q, e.c
	if c != nil {
		c.out--
		if c.stopping {
			c.wake()
		}
	}
	switch {
	case q.deleted || how == settleAck:
		b.releaseLocked(e)
	case how == settleRequeue:
		q.requeueLocked(e)
	default:
		e.c, e.expiredFrom = nil, nil
		q.deadLetterLocked(e, "rejected")
	}
	if c != nil && !c.stopping && !q.deleted {
		b.markDirtyLocked(q) // c has room again
	}
	b.flushLocked()
	return nil
}

// release marks the delivery tagged tag released: settled for its consumer,
// left for the consumer's end to put back.
func (t *Transport) release(tag uint64) error {
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.closed {
		return closedError(fmt.Sprintf("release of delivery %d", tag))
	}
	e, ok := t.pending[tag]
	if !ok || e.released {
		return fmt.Errorf("memory: release of delivery %d: no such unsettled delivery on this memory client", tag)
	}
	c := e.c
	if c == nil || !c.handOver {
		return fmt.Errorf("memory: release of delivery %d: it was not handed out by ConsumeHandOver", tag)
	}
	e.released = true
	c.out--
	c.released = append(c.released, tag)
	if c.stopping {
		c.wake()
	}
	return nil
}

// handOutLocked records e as handed out by c (nil for Get) under a new tag
// and returns its delivery.
func (t *Transport) handOutLocked(e *entry, c *consumer) transport.Delivery {
	t.lastTag++
	e.c = c
	t.pending[t.lastTag] = e
	if c != nil {
		c.out++
	}
	d := transport.Delivery{
		Message:     e.msg,
		Queue:       e.q.name,
		Redelivered: e.redelivered,
		Tag:         t.lastTag,
		Acker:       t.acker,
	}
	if c != nil && c.handOver {
		d.Acker = handOverAcker{t.acker}
	}
	if e.q.decl.quorum && e.returns > 0 {
		h := make(map[string]any, len(d.Headers)+1)
		maps.Copy(h, d.Headers)
		h["x-delivery-count"] = int64(e.returns)
		d.Headers = h
	}
	return d
}

// Get takes the message at the head of queue, if any. The delivery must be
// acked or nacked; it goes back to the queue if the client closes first.
func (t *Transport) Get(ctx context.Context, queue string) (transport.Delivery, bool, error) {
	if err := ctx.Err(); err != nil {
		return transport.Delivery{}, false, err
	}
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.closed {
		return transport.Delivery{}, false, closedError(fmt.Sprintf("get from queue %q", queue))
	}
	q, ok := b.queues[queue]
	if !ok {
		return transport.Delivery{}, false, errorf(transport.ErrNotFound, "memory: get: no queue named %q", queue)
	}
	b.markDirtyLocked(q) // expire what is due first
	b.flushLocked()
	if q.ready.len() == 0 {
		return transport.Delivery{}, false, nil
	}
	return t.handOutLocked(q.ready.popFront(), nil), true, nil
}

// Health returns nil while the client is open and an error wrapping
// transport.ErrClosed after Close.
func (t *Transport) Health(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	if t.closed {
		return closedError("health")
	}
	return nil
}

// Close closes the client. Its consumers stop, its pending Requests fail,
// and every delivery it took but did not settle goes back to the head of its
// queue marked redelivered. The broker and its other clients are not
// affected. Close is idempotent; every later call on the client fails with
// an error wrapping transport.ErrClosed.
func (t *Transport) Close() error {
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	close(t.done)
	t.endLeasesLocked()

	// Put back what never reached the application first, newest first, so
	// that after the handed-out ones go in front the queue order is kept.
	gone := closedError("consume")
	for c := range t.consumers {
		c.removeLocked()
		for c.inbox.len() > 0 {
			e := c.inbox.popBack()
			if e.q.deleted {
				b.releaseLocked(e)
				continue
			}
			e.q.putBackLocked(e)
			b.markDirtyLocked(e.q)
		}
		c.out, c.released = 0, nil
		c.end(gone)
	}
	tags := slices.SortedFunc(maps.Keys(t.pending), func(a, b uint64) int { return cmp.Compare(b, a) })
	for _, tag := range tags {
		e := t.pending[tag]
		e.released = false
		e.q.requeueLocked(e)
	}
	clear(t.pending)
	clear(t.consumers)
	b.flushLocked()
	return nil
}

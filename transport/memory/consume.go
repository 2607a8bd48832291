package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/acemq/acemq/transport"
)

var _ transport.Subscriptions = (*Transport)(nil)

// consumer is one running Consume. The queue deals entries into its inbox
// while it has room under its prefetch; the Consume goroutine hands them to
// the callback one by one. The broker's lock guards every field but signal.
type consumer struct {
	t        *Transport
	q        *queue
	prefetch int // <= 0: unlimited

	inbox    deque[*entry] // dealt, not yet handed out
	out      int           // handed out, not yet settled
	stopping bool          // its ctx ended: it takes nothing more
	err      error         // why it ended early (client closed, queue deleted)

	handOver bool     // a ConsumeHandOver: it keeps its place until it ends
	released []uint64 // tags of its deliveries given up with Release

	signal chan struct{} // buffered 1: something changed
	since  time.Time     // when it subscribed
}

// hasRoom reports whether c may be dealt one more entry.
func (c *consumer) hasRoom() bool {
	return !c.stopping && (c.prefetch <= 0 || c.inbox.len()+c.out < c.prefetch)
}

// wake tells the Consume goroutine to look again, without blocking.
func (c *consumer) wake() {
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// end stops c for reason err and wakes it.
func (c *consumer) end(err error) {
	if c.err == nil {
		c.err = err
	}
	c.wake()
}

// removeLocked takes c out of its queue's rotation; it is idempotent.
func (c *consumer) removeLocked() {
	q := c.q
	i := slices.Index(q.consumers, c)
	if i < 0 {
		return
	}
	q.consumers = slices.Delete(q.consumers, i, i+1)
	if q.rr > i {
		q.rr--
	}
	if n := len(q.consumers); n == 0 || q.rr >= n {
		q.rr = 0
	}
}

// Consume hands queue's messages to handle, on the calling goroutine and in
// the order the queue deals them, with at most prefetch (unlimited when
// prefetch <= 0) handed out and unsettled. Several consumers of one queue
// are dealt messages round-robin; on a queue with x-single-active-consumer
// only the first of them is, until it ends.
//
// When ctx ends it takes nothing more, puts back what was dealt to it but not
// handed out, and returns nil once every delivery it handed out is settled.
// It returns an error at once when the queue does not exist or the client is
// closed. If the client closes while it runs it returns at once (its
// deliveries are requeued by Close) with an error wrapping
// transport.ErrClosed, or nil if ctx had ended; if the queue is deleted it
// returns, once its deliveries are settled, an error wrapping
// transport.ErrNotFound.
func (t *Transport) Consume(ctx context.Context, queue string, prefetch int, handle func(transport.Delivery)) error {
	return t.consume(ctx, queue, prefetch, handle, false)
}

// ConsumeHandOver is Consume, made to hand a single-active-consumer queue
// over in order; it implements transport.HandOverConsumer. When ctx ends it
// hands out nothing more but stays the queue's active consumer until every
// delivery it handed out is acked, nacked or given up with
// transport.Delivery.Release. Then it puts the released deliveries back at
// the head of the queue, marked redelivered, followed by what was dealt to
// it but not handed out, all in their original order, and only then lets the
// next consumer of the queue become the active one. A client that closes
// meanwhile puts them back in the same order.
func (t *Transport) ConsumeHandOver(ctx context.Context, queue string, prefetch int, handle func(transport.Delivery)) error {
	return t.consume(ctx, queue, prefetch, handle, true)
}

func (t *Transport) consume(ctx context.Context, queue string, prefetch int, handle func(transport.Delivery), handOver bool) error {
	if handle == nil {
		return fmt.Errorf("memory: consume from queue %q: the handler is nil", queue)
	}
	b := t.b
	b.mu.Lock()
	if t.closed {
		b.mu.Unlock()
		return closedError(fmt.Sprintf("consume from queue %q", queue))
	}
	q, ok := b.queues[queue]
	if !ok {
		b.mu.Unlock()
		return errorf(transport.ErrNotFound, "memory: consume: no queue named %q", queue)
	}
	if ctx.Err() != nil {
		b.mu.Unlock()
		return nil
	}
	c := &consumer{t: t, q: q, prefetch: prefetch, handOver: handOver, signal: make(chan struct{}, 1), since: time.Now()}
	q.consumers = append(q.consumers, c)
	t.consumers[c] = struct{}{}
	b.markDirtyLocked(q)
	b.flushLocked()
	b.mu.Unlock()

	finished := false
	defer func() {
		if !finished { // handle panicked: let the others have the messages
			b.mu.Lock()
			c.stopLocked()
			c.requeueReleasedLocked()
			delete(t.consumers, c)
			b.flushLocked()
			b.mu.Unlock()
		}
	}()
	err := c.run(ctx, handle)
	finished = true
	return err
}

// Subscription reports the running Consume and ConsumeHandOver calls of
// queue on this client (transport.Subscriptions). An in-process broker
// never goes away, so each is consuming from its start until it returns,
// and Since is when the last of them subscribed.
func (t *Transport) Subscription(queue string) (transport.Subscription, bool) {
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	sub, ok := transport.Subscription{Consuming: true}, false
	for c := range t.consumers {
		if c.q.name == queue {
			ok = true
			if c.since.After(sub.Since) {
				sub.Since = c.since
			}
		}
	}
	return sub, ok
}

// run is the delivery loop of Consume.
func (c *consumer) run(ctx context.Context, handle func(transport.Delivery)) error {
	b, done := c.t.b, ctx.Done()
	for {
		select {
		case <-done:
			return c.drain(true)
		default:
		}
		b.mu.Lock()
		if c.err != nil {
			b.mu.Unlock()
			return c.drain(ctx.Err() != nil)
		}
		if c.inbox.len() > 0 {
			d := c.t.handOutLocked(c.inbox.popFront(), c)
			b.mu.Unlock()
			handle(d)
			continue
		}
		b.mu.Unlock()
		select {
		case <-c.signal:
		case <-done:
			return c.drain(true)
		}
	}
}

// stopLocked takes c out of rotation and puts back what was dealt to it but
// not handed out, in order, at the head of the queue.
func (c *consumer) stopLocked() {
	c.stopping = true
	c.removeLocked()
	for c.inbox.len() > 0 {
		e := c.inbox.popBack()
		if c.q.deleted {
			c.t.b.releaseLocked(e)
			continue
		}
		c.q.putBackLocked(e)
	}
	if !c.q.deleted {
		c.t.b.markDirtyLocked(c.q)
	}
}

// requeueReleasedLocked puts the deliveries c released back at the head of
// the queue, in the order they were handed out.
func (c *consumer) requeueReleasedLocked() {
	slices.Sort(c.released)
	for _, tag := range slices.Backward(c.released) {
		e, ok := c.t.pending[tag]
		if !ok || !e.released {
			continue
		}
		delete(c.t.pending, tag)
		e.released = false
		c.q.requeueLocked(e)
	}
	c.released = nil
}

// drain stops c and waits until every delivery it handed out is settled or
// the client has closed. It returns nil when ctx ended, otherwise why c
// ended. A hand-over consumer keeps its place in the queue's rotation, taking
// nothing, until then; it leaves it after putting back what it released and
// what it was dealt.
func (c *consumer) drain(ctxEnded bool) error {
	b := c.t.b
	b.mu.Lock()
	reason := c.err
	if c.handOver {
		c.stopping = true
	} else {
		c.stopLocked()
		b.flushLocked()
	}
	for c.out > 0 && !c.t.closed {
		b.mu.Unlock()
		<-c.signal
		b.mu.Lock()
	}
	if c.handOver && !c.t.closed {
		c.stopLocked()
		c.requeueReleasedLocked()
		b.flushLocked()
	}
	delete(c.t.consumers, c)
	b.mu.Unlock()
	if ctxEnded {
		return nil
	}
	return reason
}

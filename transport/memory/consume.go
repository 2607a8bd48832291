package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/acemq/acemq/transport"
)

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

	signal chan struct{} // buffered 1: something changed
}

// hasRoom reports whether c may be dealt one more entry.
func (c *consumer) hasRoom() bool {
	return c.prefetch <= 0 || c.inbox.len()+c.out < c.prefetch
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
// are dealt messages round-robin.
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
	if handle == nil {
		return fmt.Errorf("acemq: consume from queue %q: the handler is nil", queue)
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
		return errorf(transport.ErrNotFound, "acemq: consume: no queue named %q", queue)
	}
	if ctx.Err() != nil {
		b.mu.Unlock()
		return nil
	}
	c := &consumer{t: t, q: q, prefetch: prefetch, signal: make(chan struct{}, 1)}
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
			delete(t.consumers, c)
			b.flushLocked()
			b.mu.Unlock()
		}
	}()
	err := c.run(ctx, handle)
	finished = true
	return err
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
		c.q.ready.pushFront(e)
	}
	if !c.q.deleted {
		c.t.b.markDirtyLocked(c.q)
	}
}

// drain stops c and waits until every delivery it handed out is settled or
// the client has closed. It returns nil when ctx ended, otherwise why c
// ended.
func (c *consumer) drain(ctxEnded bool) error {
	b := c.t.b
	b.mu.Lock()
	reason := c.err
	c.stopLocked()
	b.flushLocked()
	for c.out > 0 && !c.t.closed {
		b.mu.Unlock()
		<-c.signal
		b.mu.Lock()
	}
	delete(c.t.consumers, c)
	b.mu.Unlock()
	if ctxEnded {
		return nil
	}
	return reason
}

package acemq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/acemq/acemq/internal/delay"
	"github.com/acemq/acemq/transport"
)

// forwardPrefetch bounds the due messages one Conn forwards at a time.
const forwardPrefetch = 256

// forward consumes acemq.delay.due until the Conn stops, publishing each
// message (mandatory, confirmed) to its next level queue when it is not
// due yet, and otherwise to the exchange and routing key it was sent to,
// before acking it. Several Conns may forward at once; each
// message goes through one of them (and, after a crash, maybe twice:
// at-least-once, as everywhere in acemq).
func (c *Conn) forward() {
	ctx := c.stopping
	var wg sync.WaitGroup
	err := c.t.Consume(ctx, delay.DueQueue, forwardPrefetch, func(d transport.Delivery) {
		wg.Go(func() { c.forwardOne(d) })
	})
	wg.Wait()
	if ctx.Err() != nil || errors.Is(err, ErrClosed) {
		return
	}
	// Consume outlives reconnections by itself: an error is what no retry
	// fixes (the topology deleted, no read permission on it). Stop, so
	// that Health does not report a consumer this Conn was never asked
	// for; declaring the topology again, or the next consumer's Run,
	// starts forwarding again.
	c.delays.mu.Lock()
	c.delays.declared, c.delays.started = false, false
	c.delays.ok.Store(false)
	c.delays.mu.Unlock()
	c.cfg.logger.Warn("acemq: this Conn stops forwarding delayed messages", "queue", delay.DueQueue, "error", err)
}

// sleepCtx waits d, or less when ctx ends first; it reports whether ctx is
// still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// forwardOne forwards one message of the due queue, and acks it once its
// successor is safe: in its next level queue when this process's clock
// says it is not due yet, at its destination, or in
// acemq.delay.unroutable when no queue takes it. When none of those can be published it is nacked back to the
// due queue after a pause, never dropped.
func (c *Conn) forwardOne(d transport.Delivery) {
	ctx := c.closing // a Shutdown lets the forwards in flight finish
	msg := d.Message
	h := make(map[string]any, len(msg.Headers))
	for k, v := range msg.Headers {
		if !isBrokerHeader(k) {
			h[k] = v
		}
	}
	msg.Headers = h
	exchange, key, err := delay.DecodeTo(h[delay.HeaderTo])
	if err != nil {
		c.unroutableDue(ctx, d, msg, "the message cannot be forwarded: "+err.Error())
		return
	}
	due, err := delay.ParseDue(h[delay.HeaderDue])
	if err != nil {
		c.unroutableDue(ctx, d, msg, "the message cannot be forwarded: "+err.Error())
		return
	}
	if wait := time.Until(due); wait > 0 {
		// Not due yet: on to the next level.
		msg.Exchange, msg.RoutingKey = "", delay.Hop(min(wait, MaxDelay))
		c.settleForward(ctx, d, c.publish(ctx, msg, nowNano()))
		return
	}
	delete(h, delay.HeaderTo)
	msg.Exchange, msg.RoutingKey = exchange, key
	err = c.publish(ctx, msg, nowNano())
	if errors.Is(err, ErrUnroutable) || errors.Is(err, ErrNotFound) {
		h[delay.HeaderTo] = delay.EncodeTo(exchange, key)
		c.unroutableDue(ctx, d, msg, fmt.Sprintf("no queue took it at its due time from %s: %v", destination(exchange, key), err))
		return
	}
	c.settleForward(ctx, d, err)
}

// unroutableDue moves a due message no queue takes to
// acemq.delay.unroutable, with the reason.
func (c *Conn) unroutableDue(ctx context.Context, d transport.Delivery, msg transport.Message, reason string) {
	msg.Headers[delay.HeaderError] = reason
	msg.Exchange, msg.RoutingKey = "", delay.UnroutableQueue
	err := c.publish(ctx, msg, nowNano())
	if err == nil {
		c.cfg.logger.Warn("acemq: a delayed message went to "+delay.UnroutableQueue, "id", msg.MessageID, "reason", reason)
	}
	c.settleForward(ctx, d, err)
}

// settleForward acks d when its successor was published, and otherwise
// gives it back to the due queue after a pause (so that a broker in
// trouble is not asked again at once).
func (c *Conn) settleForward(ctx context.Context, d transport.Delivery, err error) {
	if err == nil {
		_ = d.Ack() // a lost ack makes a duplicate, never a loss
		return
	}
	if ctx.Err() == nil {
		c.cfg.logger.Warn("acemq: forwarding a due message failed; it goes back to "+delay.DueQueue, "id", d.MessageID, "error", err)
		sleepCtx(ctx, time.Second)
	}
	_ = d.Nack(true)
}

package acemq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq/internal/delay"
	"github.com/acemq/acemq/transport"
)

// MaxDelay is the longest delay After and At accept, about 8.5 years; a
// longer one is an error naming both.
const MaxDelay = (1<<28 - 1) * time.Second

// After delays the message: it is delivered no earlier than d after Send.
// Send returns once the broker holds the delayed message (confirmed), in
// the delay topology of the Conn's vhost (docs/scheduling.md): neither the
// process nor a database keeps it, so the process may exit. A d of zero or
// less sends at once; a d over MaxDelay makes Send fail. The message
// arrives as it was sent (ID, type, headers, correlation, key, exchange
// and routing key) with Envelope.Due set. A delayed message cannot be
// recalled: for a schedule that may be cancelled, use the outbox's
// scheduler. Given to an outbox Publisher, the row is relayed at once
// into the delay. The last of After and At given counts.
func After(d time.Duration) SendOption {
	return sendOptionFunc(func(c *sendConfig) {
		c.due = time.Time{}
		switch {
		case d > MaxDelay:
			c.errs = append(c.errs, fmt.Errorf("acemq: After(%s) is longer than MaxDelay (%s)", d, MaxDelay))
		case d > 0:
			c.due = time.Now().Add(d)
		}
	})
}

// At delays the message until t: it is delivered no earlier than t, as
// After(time.Until(t)) would be. A t in the past sends at once; the zero
// time, or a t further than MaxDelay from now, makes Send fail.
func At(t time.Time) SendOption {
	return sendOptionFunc(func(c *sendConfig) {
		c.due = time.Time{}
		now := time.Now()
		switch {
		case t.IsZero():
			c.errs = append(c.errs, errors.New("acemq: At was given the zero time"))
		case t.Sub(now) > MaxDelay:
			c.errs = append(c.errs, fmt.Errorf("acemq: At(%s) is %s from now, longer than MaxDelay (%s)",
				t.UTC().Format(time.RFC3339), t.Sub(now).Round(time.Second), MaxDelay))
		case t.After(now):
			c.due = t
		}
	})
}

// formatDue is how x-acemq-due carries Envelope.Due.
func formatDue(t time.Time) string { return delay.FormatDue(t) }

// delayed turns msg, rendered from an envelope due at due, into the
// message that waits for it in the delay topology: to its first level
// queue, through the default exchange, with the destination in a reserved
// header. A due that has passed leaves msg as it is. The
// first delayed message of a Conn declares the topology.
func (c *Conn) delayed(ctx context.Context, msg *transport.Message, due time.Time) error {
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	if wait > MaxDelay+time.Second { // a PublishRaw's envelope may hold anything
		return fmt.Errorf("acemq: message %s is due at %s, %s from now, longer than MaxDelay (%s)",
			msg.MessageID, delay.FormatDue(due), wait.Round(time.Second), MaxDelay)
	}
	if err := c.delays.declare(ctx, c); err != nil {
		return err
	}
	// render gave a map of msg's own to an envelope with a Due, or with an
	// Attempt above 1 (a retry).
	if msg.Headers == nil {
		msg.Headers = make(map[string]any, 2)
	}
	msg.Headers[delay.HeaderTo] = delay.EncodeTo(msg.Exchange, msg.RoutingKey)
	msg.Headers[delay.HeaderDue] = delay.FormatDue(due) // a retry's replaces the first send's
	msg.Exchange, msg.RoutingKey = "", delay.Hop(wait)
	return nil
}

// delays is a Conn's part in the delay topology: whether it declared it,
// and its forwarder.
type delays struct {
	ok       atomic.Bool // declared, read without the lock
	mu       sync.Mutex
	declared bool
	started  bool
}

// declare declares the delay topology once per Conn (the transport
// declares it again after a reconnect) and starts the forwarder. A failure
// is not remembered: the next delayed message tries again.
func (d *delays) declare(ctx context.Context, c *Conn) error {
	if d.ok.Load() {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.declared {
		return nil
	}
	if err := c.t.Declare(ctx, delay.Topology(true)...); err != nil {
		return fmt.Errorf("acemq: declaring the delay topology (acemq.delay.*) for a delayed message: "+
			"the user needs the configure, write and read permissions on acemq.delay.* in the vhost: %w", err)
	}
	d.declared = true
	d.ok.Store(true)
	c.startForwarder()
	return nil
}

// watchDelays starts the forwarder when the vhost has a delay topology:
// every Conn forwards what is due, not only those that sent it, so that a
// process that sent delayed messages and exited has its messages
// delivered by whichever Conn runs. Connect calls it, and every consumer's
// Run, for a topology declared since.
func (c *Conn) watchDelays(ctx context.Context) {
	c.delays.mu.Lock()
	started := c.delays.started
	c.delays.mu.Unlock()
	if started || c.closed.Load() {
		return
	}
	if _, err := c.t.Inspect(ctx, delay.DueQueue); err != nil {
		return // no topology (or cannot tell): nothing to forward
	}
	c.delays.mu.Lock()
	c.startForwarder()
	c.delays.mu.Unlock()
	// Connect returns with the forwarder subscribed, so that Health does
	// not report it starting; a few seconds at most.
	if c.caps.subs == nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for wctx.Err() == nil && !c.closed.Load() {
		if s, ok := c.caps.subs.Subscription(delay.DueQueue); ok && s.Consuming {
			return
		}
		if !sleepCtx(wctx, 5*time.Millisecond) {
			return
		}
	}
}

// startForwarder starts the goroutine forwarding acemq.delay.due, once.
// The caller holds c.delays.mu.
func (c *Conn) startForwarder() {
	if c.delays.started || !c.startConsumer() {
		return
	}
	c.delays.started = true
	go func() {
		defer c.consumers.Done()
		c.forward()
	}()
}

package acemq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq/transport"
)

// verdict is what the engine decided for a delivery.
type verdict struct {
	outcome  Outcome
	reason   string
	delay    time.Duration
	ack      Ack
	original bool // park with the delivery's own headers, as evidence
	failed   bool // a failure to the kill switch: retried, attempts spent, a panic
}

// judge turns what the handler asked for into a verdict, applying the
// retry policy.
func (c *engine) judge(env *Envelope, ack Ack, panicked any) verdict {
	if panicked != nil {
		return verdict{outcome: OutcomeRejected, reason: fmt.Sprintf("the handler panicked: %v", panicked), ack: ack, failed: true}
	}
	v := verdict{ack: ack}
	switch ack.kind {
	case AckDone:
		v.outcome = OutcomeAcked
	case AckReject:
		v.outcome, v.reason = OutcomeRejected, "the handler rejected it: "+errText(ack.err)
	case AckFatal:
		v.outcome, v.reason = OutcomeDeadLettered, errText(ack.err)
	case AckPark:
		v.outcome, v.reason = OutcomeParked, "the handler parked it: "+errText(ack.err)
	case AckRetry:
		switch {
		case errors.Is(ack.err, ErrFatal):
			v.outcome, v.reason = OutcomeDeadLettered, errText(ack.err)
		case env.Attempt >= c.policy.MaxAttempts:
			v.outcome, v.failed = OutcomeDeadLettered, true
			v.reason = fmt.Sprintf("gave up after %d attempts: %s", env.Attempt, errText(ack.err))
		default:
			v.outcome, v.reason, v.failed = OutcomeRetried, errText(ack.err), true
			if ack.delay > 0 {
				v.delay = tierFor(c.tiers, ack.delay)
			} else {
				v.delay = c.policy.delayFor(env.Attempt + 1)
			}
		}
	default:
		v.outcome, v.reason = OutcomeRejected, "the handler returned no Ack (use Done, Retry, Reject or AckOf)"
	}
	return v
}

func errText(err error) string {
	if err == nil {
		return "no reason given"
	}
	return err.Error()
}

// settle carries out a verdict: moves the message where it goes (confirmed
// before the original is acked), records the metrics and runs the
// callbacks. A move that fails returns the delivery to its queue.
func (c *engine) settle(ctx context.Context, d transport.Delivery, ds *delivery, v verdict, handlerSeconds float64) {
	env := ds.env
	v.reason = clipReason(v.reason)
	s := Settlement{
		Queue: c.queue, Envelope: env, Outcome: v.outcome, Reason: v.reason,
		Delay: v.delay, Attempt: env.Attempt, Ack: v.ack,
	}
	if v.outcome == OutcomeAcked {
		if err := d.Ack(); err != nil {
			c.conn.cfg.logger.Warn("acemq: acking a delivery failed; the broker will deliver it again",
				"queue", c.queue, "id", env.ID, "error", err)
		}
	} else if err := c.move(ctx, d, env, v); err != nil {
		pause := c.moveBackoff(true)
		c.conn.cfg.logger.Warn("acemq: moving a delivery failed; it goes back to its queue",
			"queue", c.queue, "id", env.ID, "outcome", string(v.outcome), "retry_in", pause, "error", err)
		sleepCtx(ctx, pause)
		_ = d.Nack(true)
		s.Outcome = ""
		s.Reason = fmt.Sprintf("the move to %s failed, so the delivery went back to %s: %s", c.target(v), c.queue, err.Error())
		c.runCallbacks(ctx, ds, s, false)
		return
	}
	if v.outcome != OutcomeAcked {
		c.moveBackoff(false)
	}
	c.conn.metrics.settled(ctx, c.queue, s.Outcome, handlerSeconds)
	c.observe(v.failed, handlerSeconds >= 0)
	c.runCallbacks(ctx, ds, s, true)
}

// Bounds of the pause before a delivery whose move failed goes back to its
// queue. A move that keeps failing (its target queue deleted, the broker
// refusing) would otherwise bring the same message straight back, and the
// consumer would spin on it.
const (
	minMovePause = 50 * time.Millisecond
	maxMovePause = 5 * time.Second
)

// moveBackoff records a move that failed (or, with failed false, one that
// worked) and returns how long to pause: doubling from minMovePause with
// each consecutive failure, up to maxMovePause.
func (c *engine) moveBackoff(failed bool) time.Duration {
	if !failed {
		c.moveFailures.Store(0)
		return 0
	}
	n := min(c.moveFailures.Add(1)-1, 16)
	return min(minMovePause<<n, maxMovePause)
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// maxReason bounds a reason. It travels as the x-acemq-error header, and a
// hostile body (a decode error quoting it) or a careless error text must
// not make it too big for the broker to take.
const maxReason = 4096

// clipReason cuts s to maxReason bytes, on a rune boundary, marking the cut.
// Invalid UTF-8 (a decode error quoting a hostile body) is replaced first:
// the reason travels as a header the next consumer reads as text.
func clipReason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// target is the queue a verdict moves the message to.
func (c *engine) target(v verdict) string {
	switch v.outcome {
	case OutcomeRetried:
		return RetryQueue(c.queue, v.delay)
	case OutcomeParked:
		return ParkingQueue(c.queue)
	}
	return DeadLetterQueue(c.queue)
}

// move republishes the message to the verdict's queue and, once the broker
// confirmed it, acks the original.
func (c *engine) move(ctx context.Context, d transport.Delivery, env *Envelope, v verdict) error {
	target := c.target(v)
	var msg transport.Message
	if v.original {
		// The envelope did not parse: keep the headers exactly as they
		// arrived, so whoever reads the parking queue sees the damage.
		msg = d.Message
		msg.Exchange, msg.RoutingKey = "", target
		msg.Headers = maps.Clone(d.Headers)
		maps.DeleteFunc(msg.Headers, func(k string, _ any) bool { return isBrokerHeader(k) })
		if msg.Headers == nil || len(msg.Headers) >= maxTableEntries {
			// None, or no room for one more: the reason says how many.
			msg.Headers = make(map[string]any, 1)
		}
		msg.Headers[hdrError] = v.reason
		if msg.MessageID == "" {
			msg.MessageID = env.ID
		}
	} else {
		next := env.Clone()
		next.Error = v.reason
		if v.outcome == OutcomeRetried {
			next.Attempt++
		}
		msg = render(next, "", target, d.ContentType, d.Body, true)
	}
	ackErr, err := c.conn.relocate(ctx, msg, &d)
	if err != nil {
		return err
	}
	if ackErr != nil {
		// The successor is safe; the original will come again and be
		// handled again: at least once, never lost.
		c.conn.cfg.logger.Warn("acemq: acking a moved delivery failed; the broker will deliver it again",
			"queue", c.queue, "id", env.ID, "error", ackErr)
	}
	return nil
}

// runCallbacks runs the delivery's WhenSettled callbacks, last first, and
// then, for a real settlement, the Conn's OnSettled hooks. A panicking
// callback is logged and the rest still run.
func (c *engine) runCallbacks(ctx context.Context, ds *delivery, s Settlement, hooks bool) {
	ds.mu.Lock()
	cbs := ds.callbacks
	ds.callbacks = nil
	ds.mu.Unlock()
	for i := len(cbs) - 1; i >= 0; i-- {
		c.safeCallback(ctx, cbs[i], s)
	}
	if hooks {
		for _, fn := range c.conn.cfg.onSettled {
			c.safeCallback(ctx, fn, s)
		}
	}
}

func (c *engine) safeCallback(ctx context.Context, fn func(context.Context, Settlement), s Settlement) {
	defer func() {
		if r := recover(); r != nil {
			c.conn.cfg.logger.Error("acemq: a settlement callback panicked", "queue", c.queue, "panic", fmt.Sprint(r))
		}
	}()
	fn(ctx, s)
}

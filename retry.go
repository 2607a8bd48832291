package acemq

import (
	"fmt"
	"slices"
	"time"
)

// RetryPolicy is the retry ladder: how many deliveries a message gets and
// how long it waits between them. Each distinct delay is a tier queue,
// {queue}.retry.{delay}, whose message TTL is the delay and which
// dead-letters back to {queue}; no broker plugin is involved.
type RetryPolicy struct {
	// MaxAttempts is the number of deliveries in total, the first included;
	// 1 means no retries. Zero means the default, 5.
	MaxAttempts int
	// Delays are the waits before attempt 2, 3, ...; the last repeats. Each
	// must be a whole number of milliseconds, at least 1ms. Empty means the
	// default: 1s, 5s, 30s, 2m.
	Delays []time.Duration
	// ThroughDelay makes retries wait in the vhost's delay topology (the
	// one After uses, docs/scheduling.md) instead of a {queue}.retry.{delay}
	// tier queue per delay: no tier queue is declared, RetryAfter's delay
	// is kept as asked rather than rounded up to a tier, and Delays may be
	// as many distinct durations as wanted (jittered backoff, say). The
	// attempt count and the reason on .dlq are as with tiers. A retry then
	// needs a running Conn on the vhost to come back (every Conn forwards);
	// tier queues declared by an earlier policy are left as they are, to
	// drain back into the queue. Off by default: docs/consuming.md says
	// why. Ordered consumers retry in place and ignore it.
	ThroughDelay bool
}

// DefaultRetryPolicy returns the policy a Conn uses unless told otherwise:
// five deliveries, waiting 1s, 5s, 30s and 2m between them.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		MaxAttempts: 5,
		Delays:      []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute},
	}
}

// normalize fills defaults and checks the values. Its error has no prefix:
// the option that gave p adds the context.
func (p RetryPolicy) normalize() (RetryPolicy, error) {
	def := DefaultRetryPolicy()
	if p.MaxAttempts == 0 {
		p.MaxAttempts = def.MaxAttempts
	}
	if p.MaxAttempts < 0 {
		return p, fmt.Errorf("RetryPolicy.MaxAttempts is %d, want 1 or more", p.MaxAttempts)
	}
	if len(p.Delays) == 0 {
		p.Delays = def.Delays
	}
	for i, d := range p.Delays {
		if d < time.Millisecond || d%time.Millisecond != 0 {
			return p, fmt.Errorf("RetryPolicy.Delays[%d] is %v, want a whole number of milliseconds, at least 1ms", i, d)
		}
		if p.ThroughDelay && d > MaxDelay {
			return p, fmt.Errorf("RetryPolicy.Delays[%d] is %v, longer than MaxDelay (%v)", i, d, MaxDelay)
		}
	}
	p.Delays = slices.Clone(p.Delays)
	return p, nil
}

// delayFor returns the wait before the given attempt (2 or more).
func (p RetryPolicy) delayFor(attempt int) time.Duration {
	i := attempt - 2
	if i < 0 {
		i = 0
	}
	if i >= len(p.Delays) {
		i = len(p.Delays) - 1
	}
	return p.Delays[i]
}

// tiers returns the distinct delays, shortest first.
func (p RetryPolicy) tiers() []time.Duration {
	if p.ThroughDelay {
		return nil
	}
	t := slices.Clone(p.Delays)
	slices.Sort(t)
	return slices.Compact(t)
}

// tierFor rounds d up to a tier: the shortest tier at least d, or the
// longest when d exceeds them all.
func tierFor(tiers []time.Duration, d time.Duration) time.Duration {
	for _, t := range tiers {
		if t >= d {
			return t
		}
	}
	return tiers[len(tiers)-1]
}

// RetryQueue is the name of queue's retry tier for delay, as NewConsumer
// declares it: "orders.retry.5s", "orders.retry.2m0s".
func RetryQueue(queue string, delay time.Duration) string {
	return queue + ".retry." + delay.String()
}

// DeadLetterQueue is the name of queue's dead-letter queue, {queue}.dlq.
func DeadLetterQueue(queue string) string { return queue + ".dlq" }

// ParkingQueue is the name of queue's parking queue, {queue}.parked.
func ParkingQueue(queue string) string { return queue + ".parked" }

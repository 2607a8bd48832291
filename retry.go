package acemq

import (
	"errors"
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
}

// DefaultRetryPolicy returns the policy a Conn uses unless told otherwise:
// five deliveries, waiting 1s, 5s, 30s and 2m between them.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		MaxAttempts: 5,
		Delays:      []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute},
	}
}

// normalize fills defaults and checks the values.
func (p RetryPolicy) normalize() (RetryPolicy, error) {
	def := DefaultRetryPolicy()
	if p.MaxAttempts == 0 {
		p.MaxAttempts = def.MaxAttempts
	}
	if p.MaxAttempts < 0 {
		return p, fmt.Errorf("acemq: RetryPolicy.MaxAttempts is %d, want 1 or more", p.MaxAttempts)
	}
	if len(p.Delays) == 0 {
		p.Delays = def.Delays
	}
	for i, d := range p.Delays {
		if d < time.Millisecond || d%time.Millisecond != 0 {
			return p, fmt.Errorf("acemq: RetryPolicy.Delays[%d] is %v, want a whole number of milliseconds, at least 1ms", i, d)
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

// AckKind is what a handler asked for, as Ack.Kind reports it.
type AckKind uint8

// The kinds of Ack. AckNone is the zero Ack's: the handler did not run, or
// returned Ack{}.
const (
	AckNone   AckKind = iota // the zero Ack
	AckDone                  // Done, or AckOf(nil)
	AckRetry                 // Retry or RetryAfter, or AckOf of an error not marked Fatal
	AckReject                // Reject
	AckFatal                 // AckOf of an error marked with Fatal
)

// String names the kind: "none", "done", "retry", "reject" or "fatal".
func (k AckKind) String() string {
	switch k {
	case AckDone:
		return "done"
	case AckRetry:
		return "retry"
	case AckReject:
		return "reject"
	case AckFatal:
		return "fatal"
	}
	return "none"
}

// Ack is what a handler asks for a delivery. Make one with Done, Retry,
// RetryAfter, Reject or AckOf; the zero Ack means the handler did not run.
// Kind, Err and Delay read it back, so a handler can be tested by calling
// it and looking at what it returned, without a broker.
type Ack struct {
	kind  AckKind
	err   error
	delay time.Duration
}

// Done acks the delivery: outcome acked.
func Done() Ack { return Ack{kind: AckDone} }

// Retry asks for another attempt after the policy's delay: outcome retried,
// or dead_lettered when the attempts are spent. A Fatal err is dead-lettered
// at once.
func Retry(err error) Ack { return Ack{kind: AckRetry, err: err} }

// RetryAfter is Retry with the delay asked for, rounded up to the nearest
// tier of the policy (or down to the longest, when it exceeds them all).
func RetryAfter(d time.Duration, err error) Ack { return Ack{kind: AckRetry, err: err, delay: d} }

// Reject sends the delivery to {queue}.dlq at once, on purpose: outcome
// rejected.
func Reject(err error) Ack { return Ack{kind: AckReject, err: err} }

// AckOf maps an error to an Ack: nil is Done, an error marked with Fatal is
// dead-lettered at once, anything else is Retry.
func AckOf(err error) Ack {
	switch {
	case err == nil:
		return Done()
	case errors.Is(err, ErrFatal):
		return Ack{kind: AckFatal, err: err}
	}
	return Retry(err)
}

// Err is the error the handler gave, if any.
func (a Ack) Err() error { return a.err }

// Delay is the delay asked for with RetryAfter, zero otherwise.
func (a Ack) Delay() time.Duration { return a.delay }

// Kind is what was asked for. A Retry of an error marked with Fatal is
// still AckRetry here, though the engine dead-letters it at once.
func (a Ack) Kind() AckKind { return a.kind }

// String names what was asked, as AckKind.String does.
func (a Ack) String() string { return a.kind.String() }

// Outcome is how a delivery was settled. The same word is used by the
// counters, the spans and the settlements.
type Outcome string

// The five outcomes.
const (
	OutcomeAcked        Outcome = "acked"         // handled
	OutcomeRetried      Outcome = "retried"       // sent to a retry tier, to come back
	OutcomeRejected     Outcome = "rejected"      // sent to {queue}.dlq by the handler's choice
	OutcomeDeadLettered Outcome = "dead_lettered" // sent to {queue}.dlq: attempts spent, fatal, or refused
	OutcomeParked       Outcome = "parked"        // sent to {queue}.parked: unreadable
)

// Settlement reports how one delivery ended.
type Settlement struct {
	Queue    string
	Envelope *Envelope
	Outcome  Outcome
	Reason   string        // why, for every outcome but acked
	Delay    time.Duration // the retry delay chosen; zero otherwise
	Attempt  int           // the attempt of the delivery that settled (1 for the first)
	Ack      Ack           // what the handler asked for (Kind AckNone when it did not run)
}

// DeadLetters reports whether the delivery went to the dead-letter queue:
// true for rejected and dead_lettered, false for parked.
func (s Settlement) DeadLetters() bool {
	return s.Outcome == OutcomeRejected || s.Outcome == OutcomeDeadLettered
}

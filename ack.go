package acemq

import (
	"errors"
	"time"
)

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
	AckPark                  // Park
)

// String names the kind: "none", "done", "retry", "reject", "fatal" or
// "park".
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
	case AckPark:
		return "park"
	}
	return "none"
}

// Ack is what a handler asks for a delivery. Make one with Done, Retry,
// RetryAfter, Reject, Park or AckOf; the zero Ack means the handler did not run.
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

// Park sends the delivery to {queue}.parked at once: outcome parked, reason
// "the handler parked it: <err>". It is for a message the handler cannot
// read although the engine decoded it (a stored state or an embedded
// document of a shape this build does not know), which a fix to the
// consumer and a replay from the parking queue will handle; a message that
// is wrong should be rejected instead. A park is neither a failure to the
// kill switch nor a dead letter (Settlement.DeadLetters is false).
func Park(err error) Ack { return Ack{kind: AckPark, err: err} }

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

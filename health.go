package acemq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/acemq/acemq/transport"
)

// ConsumerState is how a Consumer or Router stands.
type ConsumerState string

// The states a ConsumerHealth reports. A consumer is in HealthReport from
// its constructor (NewConsumer, NewBatchConsumer, NewRouter) until its
// Close or its Conn's, whatever its Run does; Health fails while one is
// not running, faulted, stuck or waiting (and, as ever, while one is
// paused or tripped), unless it is Nonessential.
const (
	// StateStarting: made but not running (Run not called yet: Err wraps
	// ErrNotRunning), or Run has begun and its subscription is not up yet
	// (Err is nil). Since is when it was made, or when Run began.
	StateStarting ConsumerState = "starting"
	// StateConsuming: Run runs and takes deliveries; on a transport that
	// reports its subscriptions (transport.Subscriptions, as both shipped
	// transports do) the broker subscription is up. Since is when it
	// came up (or when Run began, if later).
	StateConsuming ConsumerState = "consuming"
	// StateWaiting: Run runs, but the transport says its subscription is
	// down (the connection was lost and is being made again, say). Err
	// wraps ErrUnavailable and is the transport's own line for it, the one
	// HealthReport.Connection holds too; Since is since when.
	StateWaiting ConsumerState = "waiting"
	// StatePaused: paused by Pause until Resume.
	StatePaused ConsumerState = "paused"
	// StateTripped: paused by the kill switch, probing now and then.
	StateTripped ConsumerState = "tripped"
	// StateFaulted: it cannot consume until someone fixes it. Its Run
	// returned an error (not ErrClosed), or, for a Router, a route is
	// invalid or NewRouter failed (then from that moment on, and Run
	// returns the error). Err wraps ErrFaulted and the cause; Since is
	// when it faulted. A Consumer's next Run clears it.
	StateFaulted ConsumerState = "faulted"
	// StateStuck: Run runs, and one of its handlers has held a delivery
	// for longer than StuckAfter (DefaultStuckAfter, 15 minutes, unless
	// given). Err wraps ErrStuck and names the message; Since is when
	// that handler call began. It ends when the call returns.
	StateStuck ConsumerState = "stuck"
	// StateStopped: its Run returned nil after its ctx ended, or ErrClosed
	// because the Conn shut down. Nothing consumes: Err wraps
	// ErrNotRunning. Since is when. (A consumer stopped with Close is not
	// in the report at all.)
	StateStopped ConsumerState = "stopped"
)

// ConsumerHealth is one Consumer or Router in a HealthReport.
type ConsumerHealth struct {
	// Queue is the queue it consumes; Kind is what it is: "consumer",
	// "batch consumer" or "router" (an Ordered one too).
	Queue, Kind string
	// State is how it stands, Since since when.
	State ConsumerState
	Since time.Time
	// Err is nil while it is consuming, or starting within a Run;
	// otherwise it says why, in the words Health uses, and wraps
	// ErrNotRunning (starting before any Run, or stopped), ErrUnavailable
	// (waiting), ErrPaused, ErrTripped, ErrStuck or ErrFaulted, as its
	// State says.
	Err error
	// InFlightFor is how long the oldest of its handler calls running now
	// has held its delivery (a batch handler's call holds its batch); 0
	// when none runs. Over StuckAfter, the consumer is stuck. The gauge
	// acemq.consumer.oldest_inflight reports the same.
	InFlightFor time.Duration
	// Partitions are the partitions of an Ordered consumer this instance
	// holds now, in order, as Consumer.Partitions returns them: none
	// while it holds none or is not running, and always none for one that
	// is not Ordered.
	Partitions []int
	// Nonessential says it was given Nonessential: its Err is not in
	// Health's.
	Nonessential bool
}

// HealthReport is Health broken down: the Conn's connection and each of
// its consumers.
type HealthReport struct {
	// Closed is true after Close or Shutdown; the rest is then empty.
	Closed bool
	// Connection is nil while the transport is healthy; otherwise it wraps
	// ErrUnavailable and the transport's own error.
	Connection error
	// Consumers are the Conn's Consumers and Routers, by queue and then by
	// kind: every one made on it, running or not, until its Close or the
	// Conn's.
	Consumers []ConsumerHealth
}

// Err is the report as Health returns it: nil when all is well, else the
// problems joined (ErrClosed alone after Close). A Nonessential consumer's
// Err is left out, and so is a waiting one's while Connection says the
// same.
func (r HealthReport) Err() error {
	if r.Closed {
		return ErrClosed
	}
	errs := []error{r.Connection}
	for _, c := range r.Consumers {
		if c.Nonessential || c.State == StateWaiting && r.Connection != nil {
			continue
		}
		errs = append(errs, c.Err)
	}
	return errors.Join(errs...)
}

// HealthReport reports the Conn's connection and each of its consumers,
// for a probe or a status page that wants more than Health's one error.
// ctx bounds the transport's check; when it has ended the report's
// Connection is ctx's error, wrapped.
func (c *Conn) HealthReport(ctx context.Context) HealthReport {
	if c.closed.Load() {
		return HealthReport{Closed: true}
	}
	var r HealthReport
	if err := ctx.Err(); err != nil {
		r.Connection = fmt.Errorf("acemq: checking health: %w", err)
	} else if err := c.t.Health(ctx); err != nil {
		if errors.Is(err, ErrClosed) {
			return HealthReport{Closed: true}
		}
		r.Connection = unavailableError{err}
	}
	for _, e := range c.registeredEngines() {
		r.Consumers = append(r.Consumers, e.health())
	}
	return r
}

// lifecycle is where an engine stands between its constructor and its
// Conn's end, for HealthReport; while Run runs, the pause state and the
// transport's subscriptions say the rest. Guarded by mu.
type lifecycle struct {
	mu    sync.Mutex
	state ConsumerState // StateStarting, StateConsuming (Run runs), StateFaulted or StateStopped
	since time.Time
	err   error // StateFaulted's: why

	// fault is a Router's invalid route (or NewRouter's error): it is
	// faulted from faultSince on, whatever Run does.
	fault      error
	faultSince time.Time
}

// setState records that the engine is now in s (err for StateFaulted).
func (e *engine) setState(s ConsumerState, err error) {
	l := &e.life
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state, l.since, l.err = s, time.Now(), err
}

// setFault makes the engine faulted for good with err; a later err joins
// the first, keeping its time.
func (e *engine) setFault(err error) {
	l := &e.life
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fault == nil {
		l.fault, l.faultSince = err, time.Now()
		return
	}
	l.fault = errors.Join(l.fault, err)
}

// health reports the engine's state for HealthReport.
func (e *engine) health() ConsumerHealth {
	h := ConsumerHealth{Queue: e.queue, Kind: e.who, Nonessential: e.cfg.nonessential, Partitions: e.partitions()}
	var oldest string
	var began time.Time
	h.InFlightFor, oldest, began = e.busy.oldest(nowNano())
	l := &e.life
	l.mu.Lock()
	state, since, err, fault, faultSince := l.state, l.since, l.err, l.fault, l.faultSince
	l.mu.Unlock()
	switch {
	case fault != nil:
		h.State, h.Since, h.Err = StateFaulted, faultSince, &faultError{since: faultSince, err: fault}
		return h
	case state == StateFaulted:
		h.State, h.Since, h.Err = StateFaulted, since, &faultError{since: since, err: err}
		return h
	case state == StateStopped:
		h.State, h.Since = state, since
		h.Err = &stateError{sentinel: ErrNotRunning, text: fmt.Sprintf("%s of %q is not running: its Run returned at %s, and nothing consumes the queue (Close it if that is meant)",
			e.who, e.queue, stamp(since))}
		return h
	case state == StateStarting && !e.running.Load():
		h.State, h.Since = state, since
		h.Err = &stateError{sentinel: ErrNotRunning, text: fmt.Sprintf("%s of %q is not running: made at %s, and its Run not called",
			e.who, e.queue, stamp(since))}
		return h
	case h.InFlightFor > e.cfg.stuckAfter:
		h.State, h.Since = StateStuck, began
		h.Err = &stateError{sentinel: ErrStuck, text: fmt.Sprintf("%s of %q is stuck: a handler has held message %s since %s (%v, over StuckAfter's %v)",
			e.who, e.queue, oldest, stamp(began), h.InFlightFor.Round(time.Second), e.cfg.stuckAfter)}
		return h
	case state != StateConsuming:
		h.State, h.Since = state, since
		return h
	}
	if paused, why := e.paused(); paused {
		p := &e.pause
		p.mu.Lock()
		manual, manualSince, tripSince := p.manual, p.manualSince, p.trippedSince
		p.mu.Unlock()
		if manual {
			h.State, h.Since, h.Err = StatePaused, manualSince, &stateError{sentinel: ErrPaused, text: why}
		} else {
			h.State, h.Since, h.Err = StateTripped, tripSince, &stateError{sentinel: ErrTripped, text: why}
		}
		return h
	}
	h.State, h.Since = StateConsuming, since
	if e.conn.caps.subs == nil {
		return h // the transport cannot tell: consuming, as far as the engine knows
	}
	sub, ok := e.subscription()
	switch {
	case !ok:
		h.State = StateStarting // between subscriptions, or before the first
	case !sub.Consuming:
		h.State, h.Since, h.Err = StateWaiting, sub.Since, unavailableError{sub.Err}
	case sub.Since.After(since):
		h.Since = sub.Since
	}
	return h
}

// subscription is how the transport says the engine's subscriptions
// stand: the queue's, or for an Ordered engine its members queue's and
// its held partitions'. ok is false when none runs.
func (e *engine) subscription() (sub transport.Subscription, ok bool) {
	subs := e.conn.caps.subs
	sub.Consuming = true
	for _, q := range e.mode.subscribed() {
		s, found := subs.Subscription(q)
		switch {
		case !found:
		case !s.Consuming && (sub.Consuming || s.Since.Before(sub.Since)):
			sub = s
		case s.Consuming && sub.Consuming && s.Since.After(sub.Since):
			sub.Since = s.Since
		}
		ok = ok || found
	}
	return sub, ok
}

// unavailableError is the transport's health error, its text as the
// transport wrote it, with ErrUnavailable reachable through errors.Is.
type unavailableError struct{ err error }

func (e unavailableError) Error() string   { return e.err.Error() }
func (e unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// stateError is a paused consumer's Health error: its own sentence, with
// the sentinel reachable through errors.Is.
type stateError struct {
	sentinel error
	text     string
}

func (e *stateError) Error() string { return "acemq: " + e.text }
func (e *stateError) Unwrap() error { return e.sentinel }

// faultError is a faulted consumer's Health error: what faulted it, in its
// own words (which name the queue), and since when, with ErrFaulted and
// the cause reachable through errors.Is.
type faultError struct {
	since time.Time
	err   error
}

func (e *faultError) Error() string {
	return fmt.Sprintf("%v (faulted since %s)", e.err, stamp(e.since))
}
func (e *faultError) Unwrap() []error { return []error{ErrFaulted, e.err} }

package acemq

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ConsumerState is how a running Consumer or Router stands.
type ConsumerState string

// The states a ConsumerHealth reports.
const (
	// StateConsuming: taking deliveries (as far as the engine knows; the
	// transport's own report says whether its subscription is up).
	StateConsuming ConsumerState = "consuming"
	// StatePaused: paused by Pause until Resume.
	StatePaused ConsumerState = "paused"
	// StateTripped: paused by the kill switch, probing now and then.
	StateTripped ConsumerState = "tripped"
)

// ConsumerHealth is one running Consumer or Router in a HealthReport.
type ConsumerHealth struct {
	// Queue is the queue it consumes; Kind is what it is: "consumer",
	// "batch consumer" or "router" (an Ordered one too).
	Queue, Kind string
	// State is how it stands, Since since when (zero while consuming).
	State ConsumerState
	Since time.Time
	// Err is nil while consuming; otherwise it wraps ErrPaused or
	// ErrTripped and says why, in the words Health uses.
	Err error
}

// HealthReport is Health broken down: the Conn's connection and each of
// its running consumers.
type HealthReport struct {
	// Closed is true after Close or Shutdown; the rest is then empty.
	Closed bool
	// Connection is nil while the transport is healthy; otherwise it wraps
	// ErrUnavailable and the transport's own error.
	Connection error
	// Consumers are the running Consumers and Routers, by queue.
	Consumers []ConsumerHealth
}

// Err is the report as Health returns it: nil when all is well, else the
// problems joined (ErrClosed alone after Close).
func (r HealthReport) Err() error {
	if r.Closed {
		return ErrClosed
	}
	errs := []error{r.Connection}
	for _, c := range r.Consumers {
		errs = append(errs, c.Err)
	}
	return errors.Join(errs...)
}

// HealthReport reports the Conn's connection and each running consumer,
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
	for _, e := range c.runningEngines() {
		r.Consumers = append(r.Consumers, e.health())
	}
	return r
}

// health reports the engine's state for HealthReport.
func (e *engine) health() ConsumerHealth {
	h := ConsumerHealth{Queue: e.queue, Kind: e.who, State: StateConsuming}
	paused, why := e.paused()
	if !paused {
		return h
	}
	p := &e.pause
	p.mu.Lock()
	manual, since, tripSince := p.manual, p.manualSince, p.trippedSince
	p.mu.Unlock()
	if manual {
		h.State, h.Since, h.Err = StatePaused, since, &stateError{sentinel: ErrPaused, text: why}
	} else {
		h.State, h.Since, h.Err = StateTripped, tripSince, &stateError{sentinel: ErrTripped, text: why}
	}
	return h
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

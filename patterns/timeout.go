package patterns

import (
	"context"
	"errors"
	"time"

	"github.com/acemq/acemq"
)

// WithTimeout gives the handler a context that ends d after the delivery
// reached it. A handler that honours its ctx and returns the deadline as its
// error (Retry(ctx.Err()), AckOf(err) with err wrapping it, ...) has that
// error replaced by one that reads "timed out after 10s", so the reason on a
// retry, a dead letter or a span says what happened; errors.Is still finds
// context.DeadlineExceeded through it. The kind of Ack is kept: a Retry
// stays a Retry (with its delay), a Reject a Reject, a Fatal a Fatal. A
// deadline that came from further out (the Conn closing, an outer
// WithTimeout) is left as it is.
//
// WithTimeout cannot stop a handler that ignores its ctx: it returns what
// the handler returns, when it returns. A d of zero or less leaves the
// handler unbounded.
func WithTimeout[T any](d time.Duration) acemq.Middleware[T] {
	return func(next acemq.Handler[T]) acemq.Handler[T] {
		if d <= 0 {
			return next
		}
		return func(ctx context.Context, m *acemq.Message[T]) acemq.Ack {
			tctx, cancel := context.WithTimeoutCause(ctx, d, errTimeoutCause)
			defer cancel()
			ack := next(tctx, m)
			err := ack.Err()
			if err == nil || !errors.Is(err, context.DeadlineExceeded) || context.Cause(tctx) != errTimeoutCause {
				return ack
			}
			return withErr(ack, &TimeoutError{After: d, Err: err})
		}
	}
}

// errTimeoutCause tells WithTimeout's own deadline from any other.
var errTimeoutCause = errors.New("patterns: WithTimeout's deadline")

// TimeoutError is the error WithTimeout puts in place of a handler's
// deadline error. It reads "timed out after <d>" and unwraps to the
// handler's error.
type TimeoutError struct {
	After time.Duration // the timeout WithTimeout was given
	Err   error         // what the handler returned
}

// Error reads "timed out after <After>".
func (e *TimeoutError) Error() string { return "timed out after " + e.After.String() }

// Unwrap returns the handler's error.
func (e *TimeoutError) Unwrap() error { return e.Err }

// withErr returns an Ack of ack's kind, and delay, carrying err instead.
func withErr(ack acemq.Ack, err error) acemq.Ack {
	switch ack.String() {
	case "retry":
		if d := ack.Delay(); d > 0 {
			return acemq.RetryAfter(d, err)
		}
		return acemq.Retry(err)
	case "reject":
		return acemq.Reject(err)
	case "fatal":
		if !errors.Is(err, acemq.ErrFatal) {
			err = acemq.Fatal(err)
		}
		return acemq.AckOf(err)
	}
	return ack
}

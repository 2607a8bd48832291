package patterns

import (
	"context"
	"errors"

	"github.com/acemq/acemq"
)

// Chain wraps h in mws, the first outermost: Chain(h, a, b) runs a, which
// runs b, which runs h, and the Ack comes back through b and then a. So a
// tracing middleware given first records what a timeout or an idempotency
// guard given after it decided. The chain is composed once, here, not per
// delivery. Nil middleware are skipped; a nil h gives a handler that
// rejects every delivery, since there is nothing to handle it with.
func Chain[T any](h acemq.Handler[T], mws ...acemq.Middleware[T]) acemq.Handler[T] {
	if h == nil {
		h = noHandler[T]
	}
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] == nil {
			continue
		}
		if wrapped := mws[i](h); wrapped != nil {
			h = wrapped
		}
	}
	return h
}

func noHandler[T any](context.Context, *acemq.Message[T]) acemq.Ack {
	return acemq.Reject(errNoHandler)
}

var errNoHandler = errors.New("patterns: Chain was given a nil handler")

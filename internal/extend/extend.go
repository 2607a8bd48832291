// Package extend is the seam acemq's own packages (patterns, outbox) use to
// reach parts of the engine users must not: send options that carry values
// of their own, and reserved x-acemq- headers.
//
// This package cannot import package acemq, which imports it, so the hooks
// are generic over acemq's types: package acemq registers them once, at
// init, as Hooks[acemq.SendOption, acemq.Envelope, acemq.Conn,
// acemq.RawMessage], and a caller gets them back typed with Get over the
// same four; nothing a caller passes or receives needs a type assertion.
package extend

import (
	"context"
	"log/slog"

	"github.com/acemq/acemq/transport"
)

// Hooks are the engine's functions for its own packages. O is
// acemq.SendOption, E acemq.Envelope, C acemq.Conn and M acemq.RawMessage.
type Hooks[O, E, C, M any] struct {
	// NewSendOption returns a send option that stores value under key for
	// whoever reads the options (see SendValue) and, when reserved is not
	// nil, sets those reserved headers on the envelope. Reserved names
	// must start with "x-acemq-".
	NewSendOption func(key, value any, reserved map[string]any) O

	// SendValue looks key up in opts; the last option that set it wins.
	// The value is the one the caller's own package stored.
	SendValue func(opts []O, key any) (any, bool)

	// Reserved returns the reserved headers of e other than the ones the
	// envelope's fields stand for. The map is e's own; writing to it (after
	// creating it with create) changes what is rendered. A nil e gives nil.
	Reserved func(e *E, create bool) map[string]any

	// PerMessage returns a send option that gives each message of a
	// Publisher's SendAll (and so of a Send through it) a context of its
	// own. start runs, with SendAll's ctx, before the message's publish
	// chain and codec; they run with the context it returns, and the
	// function it returns is called once with the message's ID and error
	// when its result is known. The otel package opens a span per message
	// with it, on the root's own pipelined path.
	PerMessage func(start func(ctx context.Context) (context.Context, func(id string, err error))) O

	// Move is the engine's one move of a delivery: it publishes m as
	// Conn.PublishRaw does and, only once the broker confirmed it, acks
	// from. err is the publish's (from is then unsettled); ackErr the
	// ack's, after which the original comes again: a duplicate, not a loss.
	Move func(c *C, ctx context.Context, from *transport.Delivery, m M) (ackErr, err error)

	// Logger returns the logger the Conn writes to (WithLogger's, or
	// slog.Default()), for a package that runs beside it, the outbox's
	// relay, to log where its user looks.
	Logger func(c *C) *slog.Logger
}

// registered holds the Hooks package acemq registered.
var registered any

// Register records package acemq's hooks; acemq calls it once, at init,
// before any package importing acemq initializes.
func Register[O, E, C, M any](h Hooks[O, E, C, M]) { registered = h }

// Get returns the hooks package acemq registered. The types must be
// those Hooks names: any others are a bug in acemq's
// own packages, and Get panics at their initialization, so every test
// finds it.
func Get[O, E, C, M any]() Hooks[O, E, C, M] {
	h, ok := registered.(Hooks[O, E, C, M])
	if !ok {
		panic("acemq: internal/extend: Get with types other than those package acemq registered")
	}
	return h
}

package acemq

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/acemq/acemq/internal/extend"
	"github.com/acemq/acemq/transport"
)

// This file is the seam acemq's own packages (patterns, outbox, otel)
// reach the engine through: the hooks registered with internal/extend.

// extOption is a send option made by acemq's own packages through
// internal/extend: it carries a value they read back and reserved headers.
type extOption struct {
	key, value any
	reserved   map[string]any
}

func (o extOption) applySend(c *sendConfig) {
	for k, v := range o.reserved {
		if !isReserved(k) {
			c.errs = append(c.errs, fmt.Errorf("acemq: internal option header %q is outside %s", k, ReservedPrefix))
			continue
		}
		if c.reserved == nil {
			c.reserved = make(map[string]any)
		}
		c.reserved[k] = v
	}
}

func init() {
	extend.Register(extend.Hooks[SendOption, Envelope, Conn, RawMessage]{
		NewSendOption: func(key, value any, reserved map[string]any) SendOption {
			return extOption{key: key, value: value, reserved: reserved}
		},
		SendValue: func(opts []SendOption, key any) (any, bool) {
			var (
				v     any
				found bool
			)
			for _, o := range opts {
				if e, ok := o.(extOption); ok && e.key == key {
					v, found = e.value, true
				}
			}
			return v, found
		},
		PerMessage: func(start func(context.Context) (context.Context, func(string, error))) SendOption {
			return extOption{key: perMessageKey{}, value: perMessage(start)}
		},
		Move: func(c *Conn, ctx context.Context, from *transport.Delivery, m RawMessage) (ackErr, err error) {
			return c.moveRaw(ctx, m, from)
		},
		Logger: func(c *Conn) *slog.Logger { return c.cfg.logger },
		Reserved: func(e *Envelope, create bool) map[string]any {
			if e == nil {
				return nil
			}
			if e.reserved == nil && create {
				e.reserved = make(map[string]any)
			}
			return e.reserved
		},
	})
}

// perMessageKey is the key of the option extend's PerMessage makes.
type perMessageKey struct{}

// perMessage gives one message of a SendAll its own context, and learns
// its result (see internal/extend's PerMessage).
type perMessage func(ctx context.Context) (context.Context, func(id string, err error))

// perMessageOf returns the last PerMessage option of opts, or nil.
func perMessageOf(opts []SendOption) perMessage {
	var pm perMessage
	for _, o := range opts {
		if e, ok := o.(extOption); ok && e.key == (perMessageKey{}) {
			pm, _ = e.value.(perMessage)
		}
	}
	return pm
}

package acemq

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq/transport"
)

// Request sends m as PublishRaw does, but as a fresh message: an
// Envelope.Error is not written (the publish chain does not run either: use
// Publisher.Prepare first for that), asking for a reply through the
// transport's direct reply-to, and waits until a reply whose CorrelationID
// is m's ID arrives or ctx ends. The reply's body is decoded into reply, a
// pointer, with the Conn's codec for the reply's content type (a *Raw takes
// the bytes as they are); the reply's envelope is returned. patterns.Request
// is the typed form.
func (c *Conn) Request(ctx context.Context, m RawMessage, reply any) (*Envelope, error) {
	if m.Envelope == nil {
		return nil, errors.New("acemq: Request was given a message without an envelope")
	}
	if reply == nil {
		return nil, errors.New("acemq: Request was given a nil reply to decode into")
	}
	if !c.publishes.add() {
		return nil, ErrClosed
	}
	defer c.publishes.done()
	// The wait for the reply is not the publish's: no duration is recorded.
	outcome := publishFailed
	defer func() { c.metrics.published(ctx, m.Exchange, outcome, -1) }()
	if err := checkMessage(&m); err != nil {
		return nil, err
	}
	err := ctx.Err()
	var r transport.Message
	if err == nil {
		r, err = c.t.Request(ctx, render(m.Envelope, m.Exchange, m.RoutingKey, m.ContentType, m.Body, false))
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return nil, fmt.Errorf("acemq: request %s to %s got no reply: %w", m.Envelope.ID, destination(m.Exchange, m.RoutingKey), cerr)
		}
		return nil, fmt.Errorf("acemq: request %s to %s: %w", m.Envelope.ID, destination(m.Exchange, m.RoutingKey), err)
	}
	outcome = publishConfirmed
	env, perr := parseEnvelope(&r)
	if perr != nil {
		return env, fmt.Errorf("acemq: the reply %s to request %s is unreadable: %w", env.ID, m.Envelope.ID, perr)
	}
	if raw, ok := reply.(*Raw); ok {
		*raw = Raw(r.Body)
		return env, nil
	}
	codec, err := c.cfg.codecs.lookup(r.ContentType)
	if err == nil {
		err = codec.Decode(r.Body, reply)
	}
	if err != nil {
		return env, fmt.Errorf("acemq: the reply %s to request %s does not decode into %T: %w", env.ID, m.Envelope.ID, reply, err)
	}
	return env, nil
}

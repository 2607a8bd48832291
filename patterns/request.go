package patterns

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
)

// Request sends req to exchange with routing key key and waits for the
// reply, which it decodes into a Resp with the Conn's codec for the reply's
// content type. The request runs the Conn's publish chain (interceptors,
// then the codec, as Send does) and asks for its reply through RabbitMQ's
// direct reply-to (amq.rabbitmq.reply-to), which the memory transport
// emulates: no reply queue is declared. The reply is the first message
// correlated to the request's ID.
//
// ctx bounds the whole exchange: give it a deadline, or Request waits as
// long as no reply comes. A request no queue takes fails at once with
// acemq.ErrUnroutable; one unanswered before ctx ends fails with ctx's
// error; a reply that does not decode into Resp fails with an error naming
// it. The handler on the other side answers with Reply.
func Request[Req, Resp any](ctx context.Context, c *acemq.Conn, exchange, key string, req Req, opts ...acemq.SendOption) (Resp, error) {
	var resp Resp
	if c == nil {
		return resp, errors.New("patterns: Request was given a nil Conn")
	}
	m, err := acemq.NewPublisher[Req](c, exchange, key).Prepare(ctx, req, opts...)
	if err != nil {
		return resp, err
	}
	m.Envelope.ReplyTo = transport.DirectReplyTo
	if _, err := c.Request(ctx, m, &resp); err != nil {
		return resp, err
	}
	return resp, nil
}

// Reply answers incoming, a request Request sent, with resp: it runs the
// Conn's publish chain on resp and publishes it, confirmed, to
// incoming.ReplyTo through the default exchange, with CorrelationID set to
// the request's ID (which no SendOption overrides). Inside a handler, use
// the handler's ctx so CausationID links the reply to the request:
//
//	func(ctx context.Context, m *acemq.Message[Quote]) acemq.Ack {
//		return acemq.AckOf(patterns.Reply(ctx, mq, m.Envelope, price(m.Payload)))
//	}
//
// A request whose requester has gone (its ctx ended, its Conn closed)
// fails with acemq.ErrUnroutable: there is nobody to answer. A message
// that asked for no reply fails at once.
func Reply[Resp any](ctx context.Context, c *acemq.Conn, incoming *acemq.Envelope, resp Resp, opts ...acemq.SendOption) error {
	switch {
	case c == nil:
		return errors.New("patterns: Reply was given a nil Conn")
	case incoming == nil:
		return errors.New("patterns: Reply was given a nil envelope")
	case incoming.ReplyTo == "":
		return fmt.Errorf("patterns: message %s asked for no reply (its ReplyTo is empty)", incoming.ID)
	}
	opts = append(opts[:len(opts):len(opts)], acemq.CorrelationID(incoming.ID))
	m, err := acemq.NewPublisher[Resp](c, "", incoming.ReplyTo).Prepare(ctx, resp, opts...)
	if err != nil {
		return err
	}
	return c.PublishRaw(ctx, m)
}

package acemq

import (
	"context"
	"fmt"
)

// PublishInterceptor runs before every Publisher send on the Conn it was
// given to, in the order given, before the codec. It may change anything on
// c; an error it returns stops the publish, and Send returns that very error.
// Messages the engine moves itself (retries, dead letters, parking, replays,
// the outbox relay) go through Conn.PublishRaw and never meet the chain.
type PublishInterceptor func(ctx context.Context, c *PublishContext) error

// ConsumeInterceptor runs for every delivery on the Conn, in the order
// given, before the body is decoded. A header it adds to c.Envelope reaches
// the handler and any dead letter; an error it returns dead-letters the
// delivery to {queue}.dlq without running the handler or any later
// interceptor.
type ConsumeInterceptor func(ctx context.Context, c *ConsumeContext) error

// PublishContext is the message a publish interceptor may change before it
// is encoded. Each publish gets a new one and the engine never reuses it, so
// an interceptor (or a closure it leaves behind) may keep the pointer and
// still find what the chain left there.
type PublishContext struct {
	// Exchange and RoutingKey are where the message goes; changes take effect.
	Exchange, RoutingKey string
	// Payload is the value about to be encoded. It may be replaced by a value
	// of the publisher's type T; a value of any other type is ignored and the
	// original is encoded.
	Payload any
	// Envelope is the message's envelope; changes reach the wire, except
	// headers in the reserved x-acemq- namespace, which are dropped.
	Envelope *Envelope
}

// SetHeader sets an application header on the envelope, creating the map
// when it is nil. It does not check the name: a name in the reserved
// x-acemq- namespace is accepted here and dropped when the envelope is
// rendered onto the wire.
func (c *PublishContext) SetHeader(name string, value any) {
	if c.Envelope == nil {
		c.Envelope = &Envelope{}
	}
	if c.Envelope.Headers == nil {
		c.Envelope.Headers = make(map[string]any)
	}
	c.Envelope.Headers[name] = value
}

// ConsumeContext is a delivery as the consume interceptors see it, before
// anything decodes it. Each delivery gets a new one and the engine never
// reuses it: a WhenSettled callback that keeps it still sees its Queue,
// Envelope, Body and ContentType.
type ConsumeContext struct {
	// Queue is the queue the delivery came from.
	Queue string
	// Envelope is the same pointer the handler is given: what an interceptor
	// changes here, the handler and any dead letter see.
	Envelope *Envelope
	// Body is a copy of the delivery's body: changing it changes nothing,
	// since the decode reads the delivery.
	Body []byte
	// ContentType is a copy too: changing it changes nothing.
	ContentType string
}

// runPublishChain runs the publish interceptors in order. A refusal is
// returned as it is; a panic becomes an error.
func runPublishChain(ctx context.Context, chain []PublishInterceptor, c *PublishContext) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("acemq: a publish interceptor panicked: %v", r)
		}
	}()
	for _, ic := range chain {
		if err := ic(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// runConsumeChain runs the consume interceptors in order and returns the
// reason for a refusal, or "" when every interceptor let the delivery pass.
func runConsumeChain(ctx context.Context, chain []ConsumeInterceptor, c *ConsumeContext) (reason string) {
	defer func() {
		if r := recover(); r != nil {
			reason = fmt.Sprintf("an interceptor panicked: %v", r)
		}
	}()
	for _, ic := range chain {
		if err := ic(ctx, c); err != nil {
			return "an interceptor refused it: " + err.Error()
		}
	}
	return ""
}

package acemq

import (
	"context"
	"errors"
	"fmt"
)

// Large bodies: a size guard at Send, and a seam for claim checks.
//
// A broker closes the channel that carried a message over its
// max_message_size (128 MiB on RabbitMQ 3.10–3.13, 16 MiB from 4.0), and
// every publish still unconfirmed on that channel fails with it. So a Conn
// refuses an over-size body before it leaves the process
// (WithMaxMessageSize). A payload that large belongs in a store, with a
// small message naming it: package blob streams one (blob.Publisher), or
// stores any encoded body over a threshold on its own through the seam
// below (blob.WithClaimCheck, which wraps WithBodyStore).

// DefaultMaxMessageSize is the largest body a Conn publishes unless
// WithMaxMessageSize says otherwise: 16 MiB, RabbitMQ 4.x's default
// max_message_size.
const DefaultMaxMessageSize = 16 << 20

// DefaultClaimCheckThreshold is the encoded size above which a Conn with a
// BodyStore stores a body instead of sending it, unless WithBodyStore is
// given another threshold: 256 KiB.
const DefaultClaimCheckThreshold = 256 << 10

// ClaimCheckContentType is the content type of a message whose body was
// stored by a BodyStore: the body that travels is the store's claim (for
// blob, a JSON Ref), and the body's own content type rides in the claim.
const ClaimCheckContentType = "application/vnd.acemq.claim-check+json"

// BodyStore keeps encoded bodies too large to travel, for a Conn given
// WithBodyStore. Package blob implements it over its stores
// (blob.WithClaimCheck); its methods are called from many goroutines at
// once.
type BodyStore interface {
	// Offload stores body, whose content type is contentType, for the
	// message env, and returns the claim that travels instead: a small
	// body from which Load gets the stored one back. A failed Offload
	// fails the Send.
	Offload(ctx context.Context, env *Envelope, contentType string, body []byte) (claim []byte, err error)
	// Load returns the body a claim names and its content type. On a
	// consumer, ctx is the delivery's, and BodyLimit(ctx) is the largest
	// body Load may return: the consumer's MaxBodySize. Load must trust
	// no size written in the claim, and read no more than the limit (and
	// one byte, to see that it is over). Its error is the reason of the
	// delivery's settlement: one marked Fatal (a body gone, corrupt, or a
	// claim naming nothing the store can hold: what no retry can fix)
	// sends the delivery to {queue}.dlq at once; any other (a body over
	// the limit, a claim whose size is not its body's, a store that
	// failed) parks it. A body over the limit that Load returns all the
	// same is parked by the consumer.
	Load(ctx context.Context, claim []byte) (contentType string, body []byte, err error)
}

// bodyLimitKey is the context key of the limit BodyLimit reports.
type bodyLimitKey struct{}

// BodyLimit reports the largest body, in bytes, that a BodyStore's Load
// may return in ctx: the MaxBodySize of the consumer loading the body
// (DefaultMaxBodySize unless set). ok is false for a ctx that carries no
// limit, a Load called outside a consumer; the store then applies a limit
// of its own.
func BodyLimit(ctx context.Context) (n int, ok bool) {
	n, ok = ctx.Value(bodyLimitKey{}).(int)
	return n, ok
}

// WithBodyStore makes the Conn's publishers store, through s, every
// encoded body over threshold bytes (0 means DefaultClaimCheckThreshold)
// and send the claim in its place, with content type
// ClaimCheckContentType; and its consumers load such a body back before
// the decode, so that handlers see their payload unchanged. The offload
// runs after the publish interceptors and the codec, and before the size
// guard, so an offloaded body only has to fit the claim; Prepare (and so
// an outbox) offloads as well. A Send that fails after the offload leaves
// the stored body to its expiry. Consume interceptors see the claim, not
// the body. A Conn without a BodyStore parks a claim-checked delivery with
// a reason naming the option, except on a Consumer[Raw], which gets the
// claim as it arrived. A negative threshold or a nil s fails Connect, and
// so does a store that has a method Validate() error returning an error
// (how a wrapper such as blob.WithClaimCheck reports bad options of its
// own at Connect rather than at the first large Send).
func WithBodyStore(s BodyStore, threshold int) ConnOption {
	return connOptionFunc(func(c *connConfig) {
		switch {
		case s == nil:
			c.fail(errors.New("acemq: WithBodyStore was given a nil store"))
			return
		case threshold < 0:
			c.fail(fmt.Errorf("acemq: WithBodyStore was given the threshold %d; want 0 (the default, %d) or more", threshold, DefaultClaimCheckThreshold))
			return
		case threshold == 0:
			threshold = DefaultClaimCheckThreshold
		}
		if v, ok := s.(interface{ Validate() error }); ok {
			if err := v.Validate(); err != nil {
				c.fail(err)
				return
			}
		}
		c.bodyStore, c.offloadAbove = s, threshold
	})
}

// WithMaxMessageSize sets the largest body, in bytes, the Conn publishes:
// Send, SendAll, Prepare and PublishRaw refuse a bigger one with an error
// naming both sizes, before anything reaches the broker, on every
// transport. The default is DefaultMaxMessageSize (16 MiB); set it to the
// broker's max_message_size when that is smaller. n below 1 fails Connect.
// The engine's own moves (a retry, a dead letter) carry a body that
// arrived, and are not checked.
func WithMaxMessageSize(n int) ConnOption {
	return connOptionFunc(func(c *connConfig) {
		if n < 1 {
			c.fail(fmt.Errorf("acemq: WithMaxMessageSize was given %d; want 1 or more", n))
			return
		}
		c.maxMessage = n
	})
}

// encoded finishes an encoded message on the publish path: it seals the
// body when the Conn has a BodyCipher (cipher.go), offloads
// the body to the BodyStore when there is one and the body is over its
// threshold, then applies the size guard.
func (c *Conn) encoded(ctx context.Context, m *RawMessage) error {
	if err := c.seal(ctx, m); err != nil {
		return err
	}
	if s := c.cfg.bodyStore; s != nil && len(m.Body) > c.cfg.offloadAbove {
		claim, err := s.Offload(ctx, m.Envelope, m.ContentType, m.Body)
		if err != nil {
			return fmt.Errorf("acemq: storing the %d-byte body of %s: %w", len(m.Body), idOf(*m), err)
		}
		m.Body, m.ContentType = claim, ClaimCheckContentType
	}
	return c.checkSize(m)
}

// checkSize is the size guard.
func (c *Conn) checkSize(m *RawMessage) error {
	limit := c.cfg.maxMessage
	if limit == 0 {
		limit = DefaultMaxMessageSize
	}
	if len(m.Body) > limit {
		return fmt.Errorf("%w: the body of %s is %d bytes, over this Conn's limit of %d (WithMaxMessageSize); send a payload this large through package blob (blob.Publisher, or blob.WithClaimCheck for typed messages)",
			ErrTooLarge, idOf(*m), len(m.Body), limit)
	}
	return nil
}

// decode is the consume path's decode: a claim-checked body is loaded from
// the BodyStore first, no bigger than maxBody (the consumer's
// MaxBodySize), then opened when the Conn has a BodyCipher (for env, the
// delivery's envelope), then the codec decodes it into v (a *T named name). An
// error of the load wraps a loadError.
func (c *Conn) decode(ctx context.Context, env *Envelope, contentType string, body []byte, v any, name string, maxBody int) error {
	if mediaType(contentType) == ClaimCheckContentType {
		s := c.cfg.bodyStore
		if _, raw := v.(*Raw); s == nil && !raw {
			return fmt.Errorf("the body is a claim check (%s), and this Conn has no store to load it from: connect with blob.WithClaimCheck (acemq.WithBodyStore) and replay it", ClaimCheckContentType)
		}
		if s != nil {
			ct, loaded, err := s.Load(context.WithValue(ctx, bodyLimitKey{}, maxBody), body)
			if err != nil {
				return loadError{fmt.Errorf("loading the claim-checked body: %w", err)}
			}
			if len(loaded) > maxBody {
				return loadError{fmt.Errorf("the claim-checked body is %d bytes, over the limit of %d (MaxBodySize)", len(loaded), maxBody)}
			}
			contentType, body = ct, loaded
		}
	}
	body, err := c.open(ctx, env, body)
	if err != nil {
		return err
	}
	return c.cfg.codecs.decode(contentType, body, v, name)
}

// loadError is a BodyStore's failure to load a claim-checked body.
type loadError struct{ err error }

func (e loadError) Error() string { return e.err.Error() }
func (e loadError) Unwrap() error { return e.err }

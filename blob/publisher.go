package blob

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/acemq/acemq"
	"github.com/google/uuid"
)

// Publisher sends large payloads: the bytes are streamed into a Store, and
// a small message, an Envelope of the caller's metadata M and the Ref,
// goes through an ordinary acemq.Publisher. It is safe for concurrent use.
type Publisher[M any] struct {
	s   Store
	pub *acemq.Publisher[Envelope[M]]
	cfg config
	err error // a configuration error, returned by every Send
}

// NewPublisher returns a Publisher that stores bodies in s and publishes
// their Envelopes of M to exchange with key, through c's publish
// interceptors, with confirms and mandatory routing as every acemq
// Publisher. A bad option, a nil c or a nil s makes every Send fail with
// the reason.
func NewPublisher[M any](c *acemq.Conn, s Store, exchange, key string, opts ...Option) *Publisher[M] {
	cfg, err := newConfig(opts)
	switch {
	case err != nil:
	case c == nil:
		err = errors.New("blob: NewPublisher was given a nil Conn")
	case s == nil:
		err = errors.New("blob: NewPublisher was given a nil Store")
	default:
		s = Counted(s, newInstruments(cfg.mp))
	}
	return &Publisher[M]{s: s, pub: acemq.NewPublisher[Envelope[M]](c, exchange, key), cfg: cfg, err: err}
}

// Send streams body into the store (in pieces through a pooled buffer:
// memory does not grow with the body's size), then publishes the Envelope
// of meta and the object's Ref, and returns the Ref once the broker
// confirmed the message. opts are the message's, as for
// acemq.Publisher.Send.
//
// The object is visible only once all of body was stored; a body that
// fails to read, a store that fails, or a ctx that ends during the Put
// leaves nothing readable and sends nothing. A publish that fails (an
// interceptor's refusal, an unroutable message, a nack, ctx) deletes the
// object again, and the error wraps the publish's (errors.Is holds). A
// process that dies between the Put and the confirm leaves an orphan,
// which its expiry and Sweep remove.
func (p *Publisher[M]) Send(ctx context.Context, meta M, body io.Reader, opts ...acemq.SendOption) (Ref, error) {
	if p == nil {
		return Ref{}, errors.New("blob: Send on a nil Publisher")
	}
	if p.err != nil {
		return Ref{}, p.err
	}
	ref, err := put(ctx, p.s, body, p.cfg)
	if err != nil {
		return Ref{}, err
	}
	if err := p.pub.Send(ctx, Envelope[M]{Meta: meta, Ref: ref}, opts...); err != nil {
		derr := deleteDetached(ctx, p.s, ref.ID)
		if derr != nil {
			return Ref{}, fmt.Errorf("blob: the message of object %q was not sent, and the object could not be deleted (its expiry will remove it: %v): %w", ref.ID, derr, err)
		}
		return Ref{}, fmt.Errorf("blob: the message of object %q was not sent, and the object is deleted: %w", ref.ID, err)
	}
	return ref, nil
}

// Put streams body into s, as Send does, and returns its Ref without
// publishing anything. It is the first half of a send through an outbox:
// store the bytes, then, in the caller's transaction, send the Envelope
// with an outbox.Publisher of Envelope[M]; the relay publishes it after
// the commit. A rolled-back transaction leaves an orphan object that
// expiry and Sweep remove (or that the caller deletes).
func Put(ctx context.Context, s Store, body io.Reader, opts ...Option) (Ref, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return Ref{}, err
	}
	if s == nil {
		return Ref{}, errors.New("blob: Put was given a nil Store")
	}
	return put(ctx, Counted(s, newInstruments(cfg.mp)), body, cfg)
}

func put(ctx context.Context, s Store, body io.Reader, cfg config) (Ref, error) {
	if body == nil {
		return Ref{}, errors.New("blob: the body is a nil io.Reader")
	}
	id := newID()
	expires := time.Now().Add(cfg.expiry).UTC()
	cr := &countingReader{ctx: ctx, r: body}
	info, err := s.Put(ctx, id, cr, expires)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%v)", cerr, err)
		}
		return Ref{}, fmt.Errorf("blob: storing object %q after %d bytes: %w", id, cr.n, err)
	}
	if info.Size != cr.n {
		_ = deleteDetached(ctx, s, id)
		return Ref{}, fmt.Errorf("blob: storing object %q: the store kept %d bytes of the %d read: %w", id, info.Size, cr.n, ErrCorrupt)
	}
	return Ref{
		ID:          id,
		Size:        info.Size,
		SHA256:      hex.EncodeToString(info.SHA256[:]),
		ContentType: cfg.contentType,
		Expires:     expires,
	}, nil
}

// countingReader counts what a Put reads and ends the read once ctx ends,
// whatever the store does with ctx.
type countingReader struct {
	ctx context.Context
	r   io.Reader
	n   int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// deleteTimeout bounds the clean-up of an object whose message failed.
const deleteTimeout = 30 * time.Second

// deleteDetached deletes id even when ctx has ended (a cancelled Send is
// the commonest reason to clean up), within deleteTimeout.
func deleteDetached(ctx context.Context, s Store, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
	defer cancel()
	return s.Delete(ctx, id)
}

func newID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}

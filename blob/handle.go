package blob

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq"
)

// Handler handles a large payload: m carries the Envelope's metadata as
// its Payload, and body streams the stored bytes. The handler returns an
// Ack as an acemq.Handler does; body must not be used after it returns.
type Handler[M any] func(ctx context.Context, m *acemq.Message[M], body *Reader) acemq.Ack

// Handle returns the acemq.Handler of Envelope[M] that runs h with a
// Reader over the object the Envelope's Ref names in s; give it to
// acemq.NewConsumer or acemq.Route. Every delivery opens the object
// afresh from its first byte, so a retry (the ladder's, one in place, a
// replay) reads it whole again, and the message is acked only as the
// handler's Ack says, after it returned: a consumer that dies mid-read
// loses nothing, the broker delivers the message again.
//
// What h cannot fix is dead-lettered at once to {queue}.dlq (an
// acemq.Fatal error): an object that is gone (expired, swept or deleted,
// or never in s: a consumer given another store), with a reason naming
// its ID and expiry; a Ref that names no object, or an ID the store
// cannot hold (ErrInvalidID: too long for a Dir store); an object whose
// records the store finds corrupt when opening it (a Dir store's
// unreadable sidecar); and an object a Read found corrupt (ErrCorrupt),
// unless h returned Done all the same. A store that fails to open the
// object otherwise is retried.
func Handle[M any](s Store, h Handler[M], opts ...HandleOption) acemq.Handler[Envelope[M]] {
	var cfg handleConfig
	for _, o := range opts {
		if o != nil {
			o.applyHandle(&cfg)
		}
	}
	var setupErr error
	switch {
	case s == nil:
		setupErr = errors.New("blob: Handle was given a nil Store")
	case h == nil:
		setupErr = errors.New("blob: Handle was given a nil Handler")
	default:
		s = Counted(s, newInstruments(cfg.mp))
	}
	return func(ctx context.Context, m *acemq.Message[Envelope[M]]) acemq.Ack {
		ref := m.Payload.Ref
		if setupErr != nil {
			return acemq.AckOf(acemq.Fatal(fmt.Errorf("%w: the object %q of message %s cannot be read", setupErr, ref.ID, m.Envelope.ID)))
		}
		if err := ref.check(); err != nil {
			return acemq.AckOf(acemq.Fatal(fmt.Errorf("blob: message %s names no object: %w", m.Envelope.ID, err)))
		}
		body := newReader(ctx, s, ref)
		defer body.close()
		// Open before the handler runs: a gone object never reaches it.
		if err := body.open(); err != nil {
			switch {
			case errors.Is(err, ErrNotFound):
				return acemq.AckOf(acemq.Fatal(gone(ref)))
			case errors.Is(err, ErrCorrupt), errors.Is(err, ErrInvalidID):
				return acemq.AckOf(acemq.Fatal(err))
			}
			return acemq.Retry(err)
		}
		inner := &acemq.Message[M]{Payload: m.Payload.Meta, Envelope: m.Envelope, Queue: m.Queue, Redelivered: m.Redelivered}
		ack := h(ctx, inner, body)
		if body.corrupted() && ack.Kind() != acemq.AckDone {
			return acemq.AckOf(acemq.Fatal(body.err))
		}
		if cfg.deleteOnDone && ack.Kind() == acemq.AckDone {
			acemq.WhenSettled(ctx, func(ctx context.Context, st acemq.Settlement) {
				if st.Outcome == acemq.OutcomeAcked {
					_ = deleteDetached(ctx, s, ref.ID) // left to expiry if it fails
				}
			})
		}
		return ack
	}
}

// gone is the reason of a message whose object is not in the store.
func gone(ref Ref) error {
	when := "it had no expiry, so it was deleted"
	if !ref.Expires.IsZero() {
		state := "it expires at "
		if time.Now().After(ref.Expires) {
			state = "it expired at "
		}
		when = state + ref.Expires.UTC().Format(time.RFC3339)
		if !time.Now().After(ref.Expires) {
			when += ", so it was deleted or is in another store"
		}
	}
	return fmt.Errorf("blob: object %q (%d bytes) is gone (%s): %w", ref.ID, ref.Size, when, ErrNotFound)
}

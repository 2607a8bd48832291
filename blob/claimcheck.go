package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/acemq/acemq"
)

// WithClaimCheck makes a Conn keep large encoded bodies in s: every
// Publisher[T] of the Conn whose encoded body is over threshold bytes (0:
// acemq.DefaultClaimCheckThreshold, 256 KiB) stores it and sends its Ref
// instead, and the Conn's consumers load the body back before the decode,
// so handlers see their T unchanged. It is acemq.WithBodyStore over s; see
// there for what the consumers and the interceptors see. opts set the
// objects' expiry (Expiry, ForPolicy), the meter provider, and whether a
// consumer deletes an object once its message was acked (DeleteOnDone; by
// default objects stay until their expiry and a Sweep). A Conn without
// the option parks a claim-checked delivery with a reason naming it.
//
// The loaded body is held in memory whole, as the decoded T will be, and
// the consumer's MaxBodySize applies to it: a claim naming more, or an
// object holding more, is parked without being loaded, as is one whose
// object's size is not its claim's. An object that is gone, corrupt or
// has an ID the store cannot hold sends the delivery to .dlq at once. For
// payloads that should stream, use a Publisher and Handle.
func WithClaimCheck(s Store, threshold int, opts ...ClaimCheckOption) acemq.ConnOption {
	cfg, err := newClaimConfig(opts)
	if err == nil && s == nil {
		err = errors.New("blob: WithClaimCheck was given a nil Store")
	}
	if err != nil {
		return acemq.WithBodyStore(failedStore{err}, threshold)
	}
	return acemq.WithBodyStore(&claimStore{s: Counted(s, newInstruments(cfg.mp)), cfg: cfg}, threshold)
}

// claimStore is a Store serving as an acemq.BodyStore: the claim is a Ref
// in JSON.
type claimStore struct {
	s   Store
	cfg claimConfig
}

func (c *claimStore) Offload(ctx context.Context, _ *acemq.Envelope, contentType string, body []byte) ([]byte, error) {
	cfg := c.cfg.config
	cfg.contentType = contentType
	ref, err := put(ctx, c.s, bytes.NewReader(body), cfg)
	if err != nil {
		return nil, err
	}
	return json.Marshal(ref)
}

// Load loads the body a claim names, trusting no size the claim gives:
// no more than the consumer's limit (acemq.BodyLimit) and one byte is ever
// read, into a buffer that grows as bytes arrive. A claim naming more than
// the limit, an object holding more, or one whose size is not its claim's
// is refused (the delivery is parked); a claim naming nothing, an object
// gone or corrupt is marked Fatal (the delivery goes to .dlq at once).
func (c *claimStore) Load(ctx context.Context, claim []byte) (string, []byte, error) {
	var ref Ref
	if err := json.Unmarshal(claim, &ref); err != nil {
		return "", nil, acemq.Fatal(fmt.Errorf("blob: the claim is not a Ref: %w", err))
	}
	if err := ref.check(); err != nil {
		return "", nil, acemq.Fatal(fmt.Errorf("blob: %w", err))
	}
	limit := int64(maxLoad)
	if n, ok := acemq.BodyLimit(ctx); ok {
		limit = min(limit, int64(n))
	}
	if ref.Size > limit {
		return "", nil, fmt.Errorf("blob: the claim of object %q names %d bytes, over this consumer's limit of %d (acemq.MaxBodySize): %w", ref.ID, ref.Size, limit, acemq.ErrTooLarge)
	}
	rc, err := c.s.Open(ctx, ref.ID, 0)
	if err != nil {
		return "", nil, openFailed(ref, err)
	}
	defer rc.Close()
	var body bytes.Buffer
	body.Grow(int(min(ref.Size, 64<<10))) // the claim may lie: grow from there as bytes come
	h := sha256.New()
	n, err := body.ReadFrom(io.TeeReader(io.LimitReader(rc, limit+1), h))
	if err != nil {
		return "", nil, readFailed(ref, err)
	}
	switch {
	case n > limit:
		return "", nil, fmt.Errorf("blob: object %q holds more than this consumer's limit of %d bytes (acemq.MaxBodySize), and its claim names %d: %w", ref.ID, limit, ref.Size, acemq.ErrTooLarge)
	case n != ref.Size:
		return "", nil, fmt.Errorf("blob: the claim of object %q names %d bytes, but the object holds %d", ref.ID, ref.Size, n)
	}
	var sum [32]byte
	if h.Sum(sum[:0]); sum != ref.digest() {
		return "", nil, acemq.Fatal(fmt.Errorf("%w: %q: its SHA-256 is %x, not %s", ErrCorrupt, ref.ID, sum, ref.SHA256))
	}
	if c.cfg.deleteOnDone {
		acemq.WhenSettled(ctx, func(ctx context.Context, st acemq.Settlement) {
			if st.Outcome == acemq.OutcomeAcked {
				_ = deleteDetached(ctx, c.s, ref.ID) // left to expiry if it fails
			}
		})
	}
	return ref.ContentType, body.Bytes(), nil
}

// openFailed is the error of a failed Open of ref's object: marked
// Fatal when no retry can fix it (the object gone, corrupt, or an ID the
// store cannot hold).
func openFailed(ref Ref, err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return acemq.Fatal(gone(ref))
	case errors.Is(err, ErrCorrupt), errors.Is(err, ErrInvalidID):
		return acemq.Fatal(fmt.Errorf("blob: opening object %q: %w", ref.ID, err))
	}
	return fmt.Errorf("blob: opening object %q: %w", ref.ID, err)
}

// readFailed is the error of a failed read of ref's object, marked as
// openFailed marks it.
func readFailed(ref Ref, err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return acemq.Fatal(gone(ref))
	case errors.Is(err, ErrCorrupt):
		return acemq.Fatal(fmt.Errorf("blob: reading object %q: %w", ref.ID, err))
	}
	return fmt.Errorf("blob: reading object %q: %w", ref.ID, err)
}

// failedStore is the BodyStore of a WithClaimCheck given bad options:
// Connect fails with its error (acemq.WithBodyStore calls Validate).
type failedStore struct{ err error }

// Validate returns why the options were bad.
func (f failedStore) Validate() error { return f.err }

func (f failedStore) Offload(context.Context, *acemq.Envelope, string, []byte) ([]byte, error) {
	return nil, f.err
}

func (f failedStore) Load(context.Context, []byte) (string, []byte, error) { return "", nil, f.err }

// maxLoad is the largest body a claim check loads into memory: 2 GiB.
const maxLoad = 2 << 30

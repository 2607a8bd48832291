package blob

import (
	"bytes"
	"context"
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
// objects' expiry (Expiry, ForPolicy) and the meter provider. A Conn
// without the option parks a claim-checked delivery with a reason naming
// it; a consumer that cannot load the body (the object gone, corrupt)
// parks the delivery with the reason.
//
// The loaded body is held in memory whole, as the decoded T will be: for
// payloads that should stream, use a Publisher and Handle.
func WithClaimCheck(s Store, threshold int, opts ...Option) acemq.ConnOption {
	cfg, err := newConfig(opts)
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
	cfg config
}

func (c *claimStore) Offload(ctx context.Context, _ *acemq.Envelope, contentType string, body []byte) ([]byte, error) {
	cfg := c.cfg
	cfg.contentType = contentType
	ref, err := put(ctx, c.s, bytes.NewReader(body), cfg)
	if err != nil {
		return nil, err
	}
	return json.Marshal(ref)
}

func (c *claimStore) Load(ctx context.Context, claim []byte) (string, []byte, error) {
	var ref Ref
	if err := json.Unmarshal(claim, &ref); err != nil {
		return "", nil, fmt.Errorf("blob: the claim is not a Ref: %w", err)
	}
	if err := ref.check(); err != nil {
		return "", nil, fmt.Errorf("blob: %w", err)
	}
	r := newReader(ctx, c.s, ref)
	defer r.close()
	if err := r.open(); err != nil {
		if errors.Is(err, ErrNotFound) {
			return "", nil, gone(ref)
		}
		return "", nil, err
	}
	if ref.Size > maxLoad {
		return "", nil, fmt.Errorf("blob: the claim names %d bytes, more than a claim check loads (%d): send a payload this large with a Publisher", ref.Size, int64(maxLoad))
	}
	body := make([]byte, ref.Size)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", nil, err
	}
	// The end is where the digest is checked.
	if n, err := r.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		if err == nil {
			err = r.corrupt(fmt.Sprintf("it holds more than its %d bytes", ref.Size))
		}
		return "", nil, err
	}
	return ref.ContentType, body, nil
}

// failedStore is the BodyStore of a WithClaimCheck given bad options: its
// first use says why.
type failedStore struct{ err error }

func (f failedStore) Offload(context.Context, *acemq.Envelope, string, []byte) ([]byte, error) {
	return nil, f.err
}

func (f failedStore) Load(context.Context, []byte) (string, []byte, error) { return "", nil, f.err }

// maxLoad is the largest body a claim check loads into memory: 2 GiB.
const maxLoad = 2 << 30

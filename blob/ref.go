package blob

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq"
)

// Ref names a stored object: it is what travels through the broker in
// place of the bytes. SHA256 is the digest of the bytes in lower-case hex;
// ContentType is what the bytes are (for a claim check, the content type
// of the encoded body); Expires is when the object stops being readable
// (the zero time: never).
type Ref struct {
	ID          string    `json:"id"`
	Size        int64     `json:"size"`
	SHA256      string    `json:"sha256"`
	ContentType string    `json:"content_type,omitempty"`
	Expires     time.Time `json:"expires,omitzero"`
}

// Envelope is the payload of the small message a Publisher sends: the
// caller's metadata M and the Ref of the stored bytes. It is an ordinary
// typed payload (JSON by default), so the message takes the ordinary path
// both ways: publish interceptors, confirms, an outbox, the consumer's type
// check (a Publisher[M] writes the type name of Envelope[M]), the retry
// ladder. Handle turns a Handler of M into the acemq.Handler of
// Envelope[M] that a Consumer or a Route takes.
type Envelope[M any] struct {
	Meta M   `json:"meta"`
	Ref  Ref `json:"ref"`
}

// check reports why r cannot name an object.
func (r Ref) check() error {
	switch {
	case r.ID == "":
		return errors.New("the Ref has no object ID")
	case r.Size < 0:
		return fmt.Errorf("the Ref of %q has the negative size %d", r.ID, r.Size)
	}
	if b, err := hex.DecodeString(r.SHA256); err != nil || len(b) != 32 {
		return fmt.Errorf("the Ref of %q has the SHA-256 %q; want 64 hex digits", r.ID, r.SHA256)
	}
	return nil
}

// digest is r's SHA-256 as bytes; r passed check.
func (r Ref) digest() (d [32]byte) {
	_, _ = hex.Decode(d[:], []byte(r.SHA256))
	return d
}

// RefOf finds the Ref in a message body, as tools reading a queue need it
// (acemq peek and replay): the claim of a claim-checked body (content type
// acemq.ClaimCheckContentType), or the ref of a Publisher's Envelope in
// JSON. It reports false for a body that carries no Ref.
func RefOf(contentType string, body []byte) (Ref, bool) {
	var r Ref
	if mediaTypeOf(contentType) == acemq.ClaimCheckContentType {
		if json.Unmarshal(body, &r) != nil || r.check() != nil {
			return Ref{}, false
		}
		return r, true
	}
	var e struct {
		Ref *Ref `json:"ref"`
	}
	if json.Unmarshal(body, &e) != nil || e.Ref == nil || e.Ref.check() != nil {
		return Ref{}, false
	}
	return *e.Ref, true
}

// mediaTypeOf is a content type without parameters, in lower case.
func mediaTypeOf(ct string) string {
	ct, _, _ = strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(ct))
}

// Missing returns a check of whether a message's object is gone from s,
// for patterns.SkipMissingBlob: given a message's content type and body,
// it finds the Ref (RefOf) and opens its object at its end, reading
// nothing. It returns a description of the object ("object ID, N bytes,
// expires T") when s reports ErrNotFound (deleted, swept or expired), ""
// when the object is there or the body carries no Ref, and the store's
// error when s could not say.
func Missing(s Store) func(ctx context.Context, contentType string, body []byte) (string, error) {
	return func(ctx context.Context, contentType string, body []byte) (string, error) {
		ref, ok := RefOf(contentType, body)
		if !ok {
			return "", nil
		}
		if s == nil {
			return "", errors.New("blob: Missing was given a nil Store")
		}
		rc, err := s.Open(ctx, ref.ID, ref.Size)
		switch {
		case errors.Is(err, ErrNotFound):
			exp := "never"
			if !ref.Expires.IsZero() {
				exp = ref.Expires.UTC().Format(time.RFC3339)
			}
			return fmt.Sprintf("object %s, %d bytes, expires %s", ref.ID, ref.Size, exp), nil
		case err != nil:
			return "", fmt.Errorf("blob: opening object %s: %w", ref.ID, err)
		}
		return "", rc.Close()
	}
}

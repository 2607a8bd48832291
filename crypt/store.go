package crypt

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	"github.com/acemq/acemq/blob"
	"github.com/tink-crypto/tink-go/v2/keyset"
	"github.com/tink-crypto/tink-go/v2/streamingaead"
	"github.com/tink-crypto/tink-go/v2/tink"
)

// NewStreamingKeyset returns a keyset of one new streaming AEAD key
// (AES-256-GCM-HKDF, 1 MiB segments), for a Store.
func NewStreamingKeyset() (*keyset.Handle, error) {
	h, err := keyset.NewHandle(streamingaead.AES256GCMHKDF1MBKeyTemplate())
	if err != nil {
		return nil, fmt.Errorf("crypt: making a streaming keyset: %w", err)
	}
	return h, nil
}

// Store is a blob.Store that encrypts every object it puts into another
// with Tink's streaming AEAD (AES-256-GCM-HKDF, in segments of 1 MiB), so
// that a payload of any size is encrypted and decrypted in bounded memory:
// a segment at a time. Each object is bound to its ID (the associated
// data): an object copied under another ID does not decrypt. Put's Info
// and Open's bytes are the plaintext's, so blob.Reader checks the size and
// SHA-256 of what the handler reads. An object that does not decrypt (a
// key no longer in the keyset, bytes changed) fails its read with an error
// wrapping blob.ErrCorrupt and ErrAuthentication. Give the same Store to
// blob.NewPublisher, blob.Handle and blob.WithClaimCheck: a claim-checked
// body is then encrypted twice (once as a body under WithBodyCipher, once
// as an object), which costs little next to its size.
type Store struct {
	inner blob.Store
	aead  tink.StreamingAEAD
}

// NewStore wraps inner with the streaming keyset h (NewStreamingKeyset;
// rotate it as any keyset: Tink tries each key of the keyset on an
// object).
func NewStore(inner blob.Store, h *keyset.Handle) (*Store, error) {
	if inner == nil || h == nil {
		return nil, errors.New("crypt: NewStore was given a nil store or keyset")
	}
	a, err := streamingaead.New(h)
	if err != nil {
		return nil, fmt.Errorf("crypt: the streaming keyset: %w", err)
	}
	return &Store{inner: inner, aead: a}, nil
}

// Put encrypts r into the wrapped store as it reads it, on a goroutine
// that Put waits for, and returns the size and SHA-256 of the plaintext.
func (s *Store) Put(ctx context.Context, id string, r io.Reader, expires time.Time) (blob.Info, error) {
	pr, pw := io.Pipe()
	hash := sha256.New()
	var size int64
	done := make(chan error, 1)
	go func() {
		err := func() error {
			w, err := s.aead.NewEncryptingWriter(pw, []byte(id))
			if err != nil {
				return fmt.Errorf("crypt: encrypting object %q: %w", id, err)
			}
			n, err := io.Copy(w, io.TeeReader(r, hash))
			size = n
			if err != nil {
				return err
			}
			return w.Close()
		}()
		pw.CloseWithError(err) // nil closes with io.EOF
		done <- err
	}()
	_, err := s.inner.Put(ctx, id, pr, expires)
	pr.CloseWithError(errors.New("crypt: the store stopped reading")) // frees a writer still blocked
	werr := <-done
	if err != nil {
		return blob.Info{}, err
	}
	if werr != nil {
		// The wrapped store took a truncated stream as whole: remove it.
		_ = s.inner.Delete(context.WithoutCancel(ctx), id)
		return blob.Info{}, werr
	}
	info := blob.Info{ID: id, Size: size}
	hash.Sum(info.SHA256[:0])
	return info, nil
}

// Open returns the plaintext of the object from offset on. The wrapped
// object is read from its start (a streaming AEAD decrypts in order), and
// the bytes before offset are decrypted and dropped.
func (s *Store) Open(ctx context.Context, id string, offset int64) (io.ReadCloser, error) {
	if offset < 0 {
		return nil, fmt.Errorf("crypt: opening object %q at offset %d", id, offset)
	}
	rc, err := s.inner.Open(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	dr, err := s.aead.NewDecryptingReader(rc, []byte(id))
	if err != nil {
		_ = rc.Close()
		return nil, s.failed(id, err)
	}
	out := &openReader{r: dr, c: rc, s: s, id: id}
	if offset > 0 {
		if _, err := io.CopyN(io.Discard, out, offset); err != nil && err != io.EOF {
			_ = rc.Close()
			return nil, err
		}
	}
	return out, nil
}

// failed is the error of an object that does not decrypt.
func (s *Store) failed(id string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w: object %q does not decrypt: %v", blob.ErrCorrupt, ErrAuthentication, id, err)
}

// openReader decrypts an object and closes the wrapped one.
type openReader struct {
	r  io.Reader
	c  io.Closer
	s  *Store
	id string
}

func (o *openReader) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	if err != nil && err != io.EOF {
		err = o.s.failed(o.id, err)
	}
	return n, err
}

func (o *openReader) Close() error { return o.c.Close() }

// Delete deletes the object from the wrapped store.
func (s *Store) Delete(ctx context.Context, id string) error { return s.inner.Delete(ctx, id) }

// Expired lists the wrapped store's expired objects.
func (s *Store) Expired(ctx context.Context, before time.Time) iter.Seq2[string, error] {
	return s.inner.Expired(ctx, before)
}

var _ blob.Store = (*Store)(nil)

package crypt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/acemq/acemq"
	"github.com/tink-crypto/tink-go/v2/aead"
	"github.com/tink-crypto/tink-go/v2/insecurecleartextkeyset"
	"github.com/tink-crypto/tink-go/v2/keyset"
	tinkpb "github.com/tink-crypto/tink-go/v2/proto/tink_go_proto"
	"github.com/tink-crypto/tink-go/v2/tink"
)

// The errors an Open returns, wrapped with what the key or the message
// was: a delivery that fails with one is parked with that reason.
var (
	// ErrUnknownKey: the body was sealed with a key the keyset does not
	// hold (removed after a rotation, or a subject's shredded key).
	ErrUnknownKey = errors.New("crypt: unknown key")
	// ErrAuthentication: the body does not authenticate under its key and
	// its envelope: it was changed, or moved onto another message.
	ErrAuthentication = errors.New("crypt: the body failed authentication")
	// ErrNotSealed: the delivery carries no acemq.CipherHeader, so its body
	// is in the clear, and the cipher was not given AllowPlain.
	ErrNotSealed = errors.New("crypt: the body is not sealed")
)

// aesGCMKey is the Tink type of the keys a keyset may hold.
const aesGCMKey = "type.googleapis.com/google.crypto.tink.AesGcmKey"

// Option configures a cipher (New, PerSubject).
type Option interface{ apply(*options) }

type options struct{ allowPlain bool }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// AllowPlain makes the cipher's Open return a body that arrived without
// acemq.CipherHeader as it is, instead of failing with ErrNotSealed: for the
// migration of a service whose queues still hold messages sent before it
// encrypted. Sends are sealed all the same. Remove it once those queues
// have drained, or a producer that forgot the cipher goes unnoticed.
func AllowPlain() Option { return optionFunc(func(o *options) { o.allowPlain = true }) }

// NewKeyset returns a keyset of one new AES-256-GCM key, its primary.
func NewKeyset() (*keyset.Handle, error) {
	h, err := keyset.NewHandle(aead.AES256GCMKeyTemplate())
	if err != nil {
		return nil, fmt.Errorf("crypt: making a keyset: %w", err)
	}
	return h, nil
}

// Rotate returns h with a new AES-256-GCM key added. With promote, the new
// key is the primary, which new sends use; the old keys stay and still
// open what they sealed. Rotation without downtime takes two steps: add
// the key without promote and deploy that keyset to every service (all can
// now open what the key will seal), then promote it and deploy again. The
// new key's ID is returned. h is not changed.
func Rotate(h *keyset.Handle, promote bool) (*keyset.Handle, uint32, error) {
	m := keyset.NewManagerFromHandle(h)
	id, err := m.Add(aead.AES256GCMKeyTemplate())
	if err != nil {
		return nil, 0, fmt.Errorf("crypt: adding a key: %w", err)
	}
	if promote {
		if err := m.SetPrimary(id); err != nil {
			return nil, 0, fmt.Errorf("crypt: promoting key %d: %w", id, err)
		}
	}
	out, err := m.Handle()
	if err != nil {
		return nil, 0, fmt.Errorf("crypt: adding a key: %w", err)
	}
	return out, id, nil
}

// Promote returns h with key id as its primary.
func Promote(h *keyset.Handle, id uint32) (*keyset.Handle, error) {
	m := keyset.NewManagerFromHandle(h)
	if err := m.SetPrimary(id); err != nil {
		return nil, fmt.Errorf("crypt: promoting key %d: %w", id, err)
	}
	out, err := m.Handle()
	if err != nil {
		return nil, fmt.Errorf("crypt: promoting key %d: %w", id, err)
	}
	return out, nil
}

// Remove returns h without key id: what it sealed no longer opens (those
// messages park with ErrUnknownKey). The primary cannot be removed.
func Remove(h *keyset.Handle, id uint32) (*keyset.Handle, error) {
	m := keyset.NewManagerFromHandle(h)
	if err := m.Delete(id); err != nil {
		return nil, fmt.Errorf("crypt: removing key %d: %w", id, err)
	}
	out, err := m.Handle()
	if err != nil {
		return nil, fmt.Errorf("crypt: removing key %d: %w", id, err)
	}
	return out, nil
}

// ReadKeyset reads a keyset written by WriteKeyset: Tink's JSON, in the
// clear. Keep such a file as a secret (a mounted secret, mode 0600), or
// keep the keyset encrypted under a KMS key instead with package
// crypt/gocloud.
func ReadKeyset(r io.Reader) (*keyset.Handle, error) {
	h, err := insecurecleartextkeyset.Read(keyset.NewJSONReader(r))
	if err != nil {
		return nil, fmt.Errorf("crypt: reading a keyset: %w", err)
	}
	return h, nil
}

// WriteKeyset writes h as Tink's JSON, in the clear: see ReadKeyset.
func WriteKeyset(h *keyset.Handle, w io.Writer) error {
	if err := insecurecleartextkeyset.Write(h, keyset.NewJSONWriter(w)); err != nil {
		return fmt.Errorf("crypt: writing a keyset: %w", err)
	}
	return nil
}

// sealer is one keyset made ready: its primitive, built once, and the
// IDs of its keys.
type sealer struct {
	aead    tink.AEAD
	primary uint32
	keyID   string // the primary's ID as the header carries it
	ids     map[uint32]bool
}

// newSealer checks h (AES-GCM keys with Tink's prefix only, a primary
// among them) and builds its primitive. prefix goes before the primary's
// ID in the header (a subject and a '/', or nothing).
func newSealer(h *keyset.Handle, prefix string) (*sealer, error) {
	if h == nil {
		return nil, errors.New("crypt: the keyset is nil")
	}
	info := h.KeysetInfo()
	s := &sealer{primary: info.GetPrimaryKeyId(), ids: make(map[uint32]bool, len(info.GetKeyInfo()))}
	for _, k := range info.GetKeyInfo() {
		if k.GetStatus() != tinkpb.KeyStatusType_ENABLED {
			continue
		}
		if k.GetTypeUrl() != aesGCMKey {
			return nil, fmt.Errorf("crypt: key %d of the keyset is a %s; want AES-GCM (NewKeyset, Rotate)", k.GetKeyId(), k.GetTypeUrl())
		}
		if k.GetOutputPrefixType() != tinkpb.OutputPrefixType_TINK {
			return nil, fmt.Errorf("crypt: key %d of the keyset writes no key ID in its ciphertexts (prefix %s); want TINK", k.GetKeyId(), k.GetOutputPrefixType())
		}
		s.ids[k.GetKeyId()] = true
	}
	if !s.ids[s.primary] {
		return nil, errors.New("crypt: the keyset has no enabled primary key")
	}
	p, err := aead.New(h)
	if err != nil {
		return nil, fmt.Errorf("crypt: the keyset: %w", err)
	}
	s.aead, s.keyID = p, prefix+strconv.FormatUint(uint64(s.primary), 10)
	return s, nil
}

// seal encrypts with the primary key.
func (s *sealer) seal(body, ad []byte) (string, []byte, error) {
	ct, err := s.aead.Encrypt(body, ad)
	if err != nil {
		return "", nil, fmt.Errorf("crypt: %w", err)
	}
	return s.keyID, ct, nil
}

// open decrypts with key id, named by the header as what. The ciphertext
// must carry the same ID in Tink's prefix: a header cannot name one key
// and the body be opened with another.
func (s *sealer) open(id uint32, what string, sealed, ad []byte) ([]byte, error) {
	if !s.ids[id] {
		return nil, fmt.Errorf("%w %s: the keyset no longer holds it (removed, or shredded)", ErrUnknownKey, what)
	}
	var prefix [5]byte
	prefix[0] = 1 // Tink's version byte before a key ID
	binary.BigEndian.PutUint32(prefix[1:], id)
	if !bytes.HasPrefix(sealed, prefix[:]) {
		return nil, fmt.Errorf("%w under key %s: the ciphertext names another key", ErrAuthentication, what)
	}
	body, err := s.aead.Decrypt(sealed, ad)
	if err != nil {
		return nil, fmt.Errorf("%w under key %s (changed, or moved onto another envelope)", ErrAuthentication, what)
	}
	return body, nil
}

// parseID reads a key ID as the header carries it.
func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%w %q: not a key ID", ErrUnknownKey, s)
	}
	return uint32(n), nil
}

// Keys is an acemq.BodyCipher over one Tink keyset of AES-256-GCM keys:
// it seals with the primary key and opens with any key of the keyset,
// which acemq.CipherHeader names by its Tink key ID. Its primitive is built
// once, at New and at each Replace. It is safe for concurrent use.
type Keys struct {
	cur        atomic.Pointer[sealer]
	allowPlain bool
}

// New returns a cipher over h, which must hold AES-GCM keys written with
// Tink's key ID prefix (as NewKeyset and Rotate make them) and an enabled
// primary.
func New(h *keyset.Handle, opts ...Option) (*Keys, error) {
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	s, err := newSealer(h, "")
	if err != nil {
		return nil, err
	}
	k := &Keys{allowPlain: o.allowPlain}
	k.cur.Store(s)
	return k, nil
}

// Replace makes h the keyset of k, for the seals and opens that start
// after it returns: how a running service takes a rotated keyset without
// a restart. A keyset New would refuse is refused and k keeps its own.
func (k *Keys) Replace(h *keyset.Handle) error {
	s, err := newSealer(h, "")
	if err != nil {
		return err
	}
	k.cur.Store(s)
	return nil
}

// Primary returns the ID of the key new seals use.
func (k *Keys) Primary() uint32 { return k.cur.Load().primary }

// Seal encrypts body with the primary key (acemq.BodyCipher).
func (k *Keys) Seal(_ context.Context, _ *acemq.Envelope, body, associatedData []byte) (string, []byte, error) {
	return k.cur.Load().seal(body, associatedData)
}

// Open decrypts sealed with the key keyID names (acemq.BodyCipher). A
// per-subject key ID, "subject/ID", is read as ID: given the subject's
// keyset, Keys opens what PerSubject sealed.
func (k *Keys) Open(_ context.Context, _ *acemq.Envelope, keyID string, sealed, associatedData []byte) ([]byte, error) {
	if keyID == "" {
		return plain(k.allowPlain, sealed)
	}
	// A subject's key ID ("subject/ID", see PerSubject) opens with that
	// subject's keyset: how a tool given it reads the subject's messages.
	idText := keyID
	if i := strings.LastIndexByte(keyID, '/'); i >= 0 {
		idText = keyID[i+1:]
	}
	id, err := parseID(idText)
	if err != nil {
		return nil, err
	}
	return k.cur.Load().open(id, keyID, sealed, associatedData)
}

// plain is Open's answer to a body without a key.
func plain(allow bool, body []byte) ([]byte, error) {
	if allow {
		return body, nil
	}
	return nil, fmt.Errorf("%w (it carries no %s header; crypt.AllowPlain lets such bodies through while queues drain)", ErrNotSealed, acemq.CipherHeader)
}

var _ acemq.BodyCipher = (*Keys)(nil)

package crypt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/acemq/acemq"
	"github.com/tink-crypto/tink-go/v2/keyset"
)

// SubjectKeys holds one keyset per subject (a tenant, a customer, any
// data subject) for PerSubject. Its methods are called from many
// goroutines at once.
type SubjectKeys interface {
	// Keyset returns subject's keyset. When the subject has none, it makes
	// one (NewKeyset) and keeps it if create is true (a send), and fails
	// with an error wrapping ErrUnknownKey if not (a delivery: the key was
	// shredded). It should return the same *keyset.Handle for as long as
	// the keyset does not change: PerSubject builds a subject's primitive
	// again only when the handle changes.
	Keyset(ctx context.Context, subject string, create bool) (*keyset.Handle, error)
}

// MemorySubjectKeys is a SubjectKeys in memory, for tests and for a
// service that keeps the keysets elsewhere and loads them at start (Set).
// The zero value is ready to use.
type MemorySubjectKeys struct {
	mu   sync.Mutex
	sets map[string]*keyset.Handle
}

// Keyset implements SubjectKeys.
func (m *MemorySubjectKeys) Keyset(_ context.Context, subject string, create bool) (*keyset.Handle, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.sets[subject]; ok {
		return h, nil
	}
	if !create {
		return nil, fmt.Errorf("%w: subject %q has no keyset", ErrUnknownKey, subject)
	}
	h, err := NewKeyset()
	if err != nil {
		return nil, err
	}
	m.set(subject, h)
	return h, nil
}

// Set makes h subject's keyset (a rotated one, or one loaded at start).
func (m *MemorySubjectKeys) Set(subject string, h *keyset.Handle) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.set(subject, h)
}

func (m *MemorySubjectKeys) set(subject string, h *keyset.Handle) {
	if m.sets == nil {
		m.sets = make(map[string]*keyset.Handle)
	}
	m.sets[subject] = h
}

// Delete shreds subject's keyset: whatever was sealed under it, wherever
// it was copied, no longer opens. A later send for the subject makes a
// new keyset.
func (m *MemorySubjectKeys) Delete(subject string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sets, subject)
}

// Subjects is an acemq.BodyCipher with a keyset per subject: a message is
// sealed under the keyset of the subject a function of its envelope
// names, and acemq.CipherHeader carries "subject/keyID". Deleting a
// subject's keyset (crypto-shredding) leaves its messages unreadable
// wherever they were copied: they are parked with ErrUnknownKey, and
// every other subject's are handled. It is safe for concurrent use.
type Subjects struct {
	keys       SubjectKeys
	subject    func(*acemq.Envelope) string
	allowPlain bool
	cache      sync.Map // subject → *cached
}

// cached is a subject's sealer and the handle it was built from.
type cached struct {
	h *keyset.Handle
	s *sealer
}

// PerSubject returns a cipher that seals each message under the keyset
// keys holds for subject(env), which must return a non-empty name without
// a '/' or a send fails. The name travels in the clear in
// acemq.CipherHeader: use an opaque ID (a tenant or customer ID), not an
// e-mail address. keys is asked for the subject's keyset at every seal and
// open, so a deleted keyset takes effect at once; the primitive built from
// it is kept, per subject seen, until keys returns another handle or none.
func PerSubject(keys SubjectKeys, subject func(*acemq.Envelope) string, opts ...Option) (*Subjects, error) {
	if keys == nil || subject == nil {
		return nil, errors.New("crypt: PerSubject was given a nil SubjectKeys or subject function")
	}
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	return &Subjects{keys: keys, subject: subject, allowPlain: o.allowPlain}, nil
}

// sealer returns subject's sealer, built again only when its handle
// changed.
func (p *Subjects) sealer(ctx context.Context, subject string, create bool) (*sealer, error) {
	h, err := p.keys.Keyset(ctx, subject, create)
	if err != nil {
		p.cache.Delete(subject)
		return nil, err
	}
	if c, ok := p.cache.Load(subject); ok && c.(*cached).h == h {
		return c.(*cached).s, nil
	}
	s, err := newSealer(h, subject+"/")
	if err != nil {
		return nil, fmt.Errorf("crypt: subject %q: %w", subject, err)
	}
	p.cache.Store(subject, &cached{h: h, s: s})
	return s, nil
}

// Seal encrypts body under the primary key of its subject's keyset
// (acemq.BodyCipher).
func (p *Subjects) Seal(ctx context.Context, env *acemq.Envelope, body, associatedData []byte) (string, []byte, error) {
	subject := p.subject(env)
	if subject == "" || strings.Contains(subject, "/") {
		return "", nil, fmt.Errorf("crypt: the subject of the message is %q; want a non-empty name without '/'", subject)
	}
	s, err := p.sealer(ctx, subject, true)
	if err != nil {
		return "", nil, err
	}
	return s.seal(body, associatedData)
}

// Open decrypts sealed with the subject's key keyID names
// (acemq.BodyCipher).
func (p *Subjects) Open(ctx context.Context, _ *acemq.Envelope, keyID string, sealed, associatedData []byte) ([]byte, error) {
	if keyID == "" {
		return plain(p.allowPlain, sealed)
	}
	subject, idText, ok := strings.Cut(keyID, "/")
	if !ok || subject == "" {
		return nil, fmt.Errorf("%w %q: not a subject's key (want subject/ID)", ErrUnknownKey, keyID)
	}
	id, err := parseID(idText)
	if err != nil {
		return nil, err
	}
	s, err := p.sealer(ctx, subject, false)
	if err != nil {
		return nil, err
	}
	return s.open(id, keyID, sealed, associatedData)
}

var _ acemq.BodyCipher = (*Subjects)(nil)

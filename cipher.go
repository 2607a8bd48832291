package acemq

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/acemq/acemq/internal/wire"
)

// Encrypted bodies: a seam in the root, the keys in package crypt.
//
// A Conn given WithBodyCipher seals every body it encodes and opens every
// body it decodes. It is a Conn option rather than a Codec wrapper because
// a codec sees a payload, not a message: it cannot bind the ciphertext to
// the envelope it travels in, cannot name its key in a header, and a
// claim-checked body would be stored after it ran, encrypted or not
// depending on where the wrapper sat. The seam sits where every encoded
// body passes: after the codec and before the claim check and the size
// guard on the way out, after the claim check's load and before the decode
// on the way in.

// CipherHeader is the reserved header naming the key a body was sealed
// with, as the BodyCipher that sealed it wrote it (package crypt writes
// the Tink key ID, and the subject before it for a per-subject key). Its
// presence says the body is sealed; it travels with the message through
// every move (a retry, .dlq, .parked, a replay, an outbox row), so a body
// that arrives sealed can be opened wherever it goes. Envelope.Reserved
// holds it on a delivery.
const CipherHeader = "x-acemq-cipher-key"

// BodyCipher seals and opens message bodies with an AEAD, for a Conn given
// WithBodyCipher. Package crypt implements it over Tink keysets. Its
// methods are called from many goroutines at once and must not keep the
// slices they are given.
type BodyCipher interface {
	// Seal encrypts body, the encoded body of the message env, under the
	// key the cipher chooses for it (the primary one, or the subject's),
	// authenticating associatedData with it, and returns the ciphertext
	// and the ID of the key, which travels in CipherHeader. Its error
	// fails the Send.
	Seal(ctx context.Context, env *Envelope, body, associatedData []byte) (keyID string, sealed []byte, err error)
	// Open decrypts sealed, the body of the delivery env, sealed with the
	// key keyID, checking associatedData. keyID is empty when the
	// delivery carried no CipherHeader: the body arrived in the clear, and
	// Open either refuses it or returns it as it is (a migration). Its
	// error parks the delivery, with the error in the reason: a key the
	// cipher does not have (removed, or a shredded subject's), a body
	// that fails authentication (tampered with, or moved onto another
	// envelope), or a plain body it refuses.
	Open(ctx context.Context, env *Envelope, keyID string, sealed, associatedData []byte) (body []byte, err error)
}

// WithBodyCipher makes the Conn's publishers seal every encoded body with
// c, and its consumers open every body before the decode. The envelope
// stays readable (routing needs it): its ID and type are the associated
// data the AEAD authenticates, so a body cannot be moved onto another
// message, and the key's ID rides in CipherHeader. The seal runs after the
// publish interceptors and the codec and before the claim check
// (WithBodyStore) and the size guard, so a claim-checked object holds the
// ciphertext, and so does an outbox row (Prepare seals too). The engine's
// own moves and PublishRaw carry a body as it is: a sealed body stays
// sealed in the retry tiers, .dlq and .parked. Consume interceptors see the
// sealed body; a Consumer[Raw] gets the opened one. A delivery that does
// not open is parked with the cipher's error as its reason, never acked.
// A nil c fails Connect, and so does giving the option twice.
func WithBodyCipher(c BodyCipher) ConnOption {
	return connOptionFunc(func(cfg *connConfig) {
		switch {
		case c == nil:
			cfg.fail(errors.New("acemq: WithBodyCipher was given a nil cipher"))
		case cfg.cipher != nil:
			cfg.fail(errors.New("acemq: WithBodyCipher was given twice; a Conn seals with one cipher"))
		default:
			cfg.cipher = c
		}
	})
}

// associatedData is what a sealed body is bound to: the envelope's ID
// and type, each with its length before it so that no two pairs give the
// same bytes. Both survive every move, and neither can change without the
// body failing to open.
func associatedData(env *Envelope) []byte {
	ad := make([]byte, 0, 4+len(env.ID)+len(env.Type))
	ad = appendField(ad, env.ID)
	return appendField(ad, env.Type)
}

// appendField appends s with its length, two bytes big-endian (IDs and
// types are AMQP short strings, at most 255 bytes).
func appendField(b []byte, s string) []byte {
	return append(append(b, byte(len(s)>>8), byte(len(s))), s...)
}

// seal encrypts m's body with the Conn's cipher, if it has one, and names
// the key in m's envelope.
func (c *Conn) seal(ctx context.Context, m *RawMessage) error {
	ci := c.cfg.cipher
	if ci == nil {
		return nil
	}
	keyID, sealed, err := guardCipher(func() (string, []byte, error) {
		return ci.Seal(ctx, m.Envelope, m.Body, associatedData(m.Envelope))
	})
	if err != nil {
		return fmt.Errorf("acemq: sealing the body of %s: %w", idOf(*m), err)
	}
	if keyID == "" || len(keyID) > wire.MaxShortString || !utf8.ValidString(keyID) {
		return fmt.Errorf("acemq: sealing the body of %s: the cipher named the key %s; want 1 to %d bytes of UTF-8", idOf(*m), quoteValue(keyID), wire.MaxShortString)
	}
	m.Envelope.cipherKey = keyID
	m.Body = sealed
	return nil
}

// open decrypts a delivery's body with the Conn's cipher, if it has one.
// The error is the reason the delivery is parked.
func (c *Conn) open(ctx context.Context, env *Envelope, body []byte) ([]byte, error) {
	return openBody(ctx, c.cfg.cipher, env, body)
}

// openBody is open with the cipher ci, nil for none.
func openBody(ctx context.Context, ci BodyCipher, env *Envelope, body []byte) ([]byte, error) {
	if ci == nil || env == nil {
		return body, nil
	}
	_, opened, err := guardCipher(func() (string, []byte, error) {
		b, err := ci.Open(ctx, env, env.cipherKey, body, associatedData(env))
		return "", b, err
	})
	if err != nil {
		return nil, fmt.Errorf("the body does not open: %w", err)
	}
	return opened, nil
}

// OpenBody opens body, the body of a message whose envelope is env, with
// c, as a consumer on a Conn given WithBodyCipher(c) would: for tools that
// read a queue directly (acemq peek and replay, the console) and are given
// the keyset. A body without CipherHeader is handed to c as plain (see
// BodyCipher.Open). A claim-checked body must be loaded first. The error
// says why the body does not open, prefixed "acemq: ".
func OpenBody(ctx context.Context, c BodyCipher, env *Envelope, body []byte) ([]byte, error) {
	if c == nil || env == nil {
		return nil, errors.New("acemq: OpenBody needs a cipher and an envelope")
	}
	opened, err := openBody(ctx, c, env, body)
	if err != nil {
		return nil, fmt.Errorf("acemq: %w", err)
	}
	return opened, nil
}

// guardCipher runs a BodyCipher's method, turning a panic (a subject
// function's, say) into an error: a send fails, a delivery parks, and the
// process goes on.
func guardCipher(fn func() (string, []byte, error)) (key string, b []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the cipher panicked: %v", v)
		}
	}()
	return fn()
}

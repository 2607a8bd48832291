// Package gocloud keeps crypt's keysets encrypted under a key held by a
// KMS, through gocloud.dev/secrets: AWS KMS, Google Cloud KMS, Azure Key
// Vault, HashiCorp Vault, or localsecrets in tests. It is a module of its
// own (github.com/acemq/acemq/crypt/gocloud), so that the cloud SDKs enter
// the module graph of a service that imports it, and no other.
//
// A keyset written with WriteKeyset is Tink's encrypted keyset: its keys
// are encrypted under the KMS key, and only a process the KMS lets decrypt
// can read them (ReadKeyset). The KMS is called once per read or write,
// never per message: the keyset's keys seal and open the messages.
package gocloud

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tink-crypto/tink-go/v2/keyset"
	"gocloud.dev/secrets"
)

// associatedData binds an encrypted keyset to its use: a blob of another
// application encrypted under the same KMS key does not read as a keyset.
// The KMS keeps no associated data of its own, so it is checked here: it
// is sealed with the keyset by Tink itself.
var associatedData = []byte("acemq crypt keyset")

// ReadKeyset reads a keyset WriteKeyset wrote, decrypting its keys with
// keeper (secrets.OpenKeeper with a URL such as awskms://..., gcpkms://...,
// base64key://... for tests).
func ReadKeyset(ctx context.Context, keeper *secrets.Keeper, r io.Reader) (*keyset.Handle, error) {
	if keeper == nil {
		return nil, errors.New("crypt/gocloud: ReadKeyset was given a nil keeper")
	}
	h, err := keyset.ReadWithContext(ctx, keyset.NewJSONReader(r), kms{keeper}, associatedData)
	if err != nil {
		return nil, fmt.Errorf("crypt/gocloud: reading a keyset: %w", err)
	}
	return h, nil
}

// WriteKeyset writes h with its keys encrypted under keeper's key.
func WriteKeyset(ctx context.Context, keeper *secrets.Keeper, h *keyset.Handle, w io.Writer) error {
	if keeper == nil || h == nil {
		return errors.New("crypt/gocloud: WriteKeyset was given a nil keeper or keyset")
	}
	if err := h.WriteWithContext(ctx, keyset.NewJSONWriter(w), kms{keeper}, associatedData); err != nil {
		return fmt.Errorf("crypt/gocloud: writing a keyset: %w", err)
	}
	return nil
}

// kms is a Keeper as the key-encryption AEAD Tink asks for. A KMS
// authenticates what it decrypts but takes no associated data, so the
// associated data is put before the plaintext and checked on the way
// back.
type kms struct{ k *secrets.Keeper }

func (a kms) EncryptWithContext(ctx context.Context, plaintext, ad []byte) ([]byte, error) {
	return a.k.Encrypt(ctx, append(append(frame(ad), ad...), plaintext...))
}

func (a kms) DecryptWithContext(ctx context.Context, ciphertext, ad []byte) ([]byte, error) {
	pt, err := a.k.Decrypt(ctx, ciphertext)
	if err != nil {
		return nil, err
	}
	head := append(frame(ad), ad...)
	if len(pt) < len(head) || string(pt[:len(head)]) != string(head) {
		return nil, errors.New("the keyset was encrypted for another use")
	}
	return pt[len(head):], nil
}

// frame is ad's length, four bytes big-endian.
func frame(ad []byte) []byte {
	n := len(ad)
	return []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
}

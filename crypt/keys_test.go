package crypt_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/crypt"
	"github.com/stretchr/testify/require"
	"github.com/tink-crypto/tink-go/v2/aead"
	"github.com/tink-crypto/tink-go/v2/keyset"
)

func TestNewRefusesKeysets(t *testing.T) {
	t.Parallel()
	raw, err := keyset.NewHandle(aead.AES256GCMNoPrefixKeyTemplate())
	require.NoError(t, err)
	chacha, err := keyset.NewHandle(aead.ChaCha20Poly1305KeyTemplate())
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		h    *keyset.Handle
		want string
	}{
		{"nil", nil, "crypt: the keyset is nil"},
		{"no prefix", raw, "writes no key ID in its ciphertexts"},
		{"not AES-GCM", chacha, "want AES-GCM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := crypt.New(tc.h)
			require.ErrorContains(t, err, tc.want)
			k, _ := newKeys(t)
			before := k.Primary()
			require.ErrorContains(t, k.Replace(tc.h), tc.want)
			require.Equal(t, before, k.Primary(), "a refused keyset changes nothing")
		})
	}
	_, err = crypt.PerSubject(nil, nil)
	require.ErrorContains(t, err, "crypt: PerSubject was given a nil")
}

// TestKeysetRoundTrip: a keyset written and read back opens what the
// original sealed.
func TestKeysetRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k, h := newKeys(t)
	var buf bytes.Buffer
	require.NoError(t, crypt.WriteKeyset(h, &buf))
	h2, err := crypt.ReadKeyset(&buf)
	require.NoError(t, err)
	k2, err := crypt.New(h2)
	require.NoError(t, err)
	env := &acemq.Envelope{ID: "m-1", Type: "OrderPlaced"}
	id, sealed, err := k.Seal(ctx, env, []byte(marker), []byte("ad"))
	require.NoError(t, err)
	body, err := k2.Open(ctx, env, id, sealed, []byte("ad"))
	require.NoError(t, err)
	require.Equal(t, marker, string(body))
	_, err = k2.Open(ctx, env, "x1", sealed, []byte("ad"))
	require.ErrorIs(t, err, crypt.ErrUnknownKey)
	// A header that names another key of the keyset than the ciphertext.
	h3, other, err := crypt.Rotate(h2, false)
	require.NoError(t, err)
	k3, err := crypt.New(h3)
	require.NoError(t, err)
	_, err = k3.Open(ctx, env, itoa(other), sealed, []byte("ad"))
	require.ErrorIs(t, err, crypt.ErrAuthentication)
	_, err = crypt.ReadKeyset(bytes.NewReader([]byte("{")))
	require.ErrorContains(t, err, "crypt: reading a keyset")
}

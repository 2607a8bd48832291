package gocloud_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/crypt"
	cryptgocloud "github.com/acemq/acemq/crypt/gocloud"
	"go.uber.org/goleak"
	"gocloud.dev/secrets"
	"gocloud.dev/secrets/localsecrets"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func keeper(t *testing.T) *secrets.Keeper {
	t.Helper()
	key, err := localsecrets.NewRandomKey()
	if err != nil {
		t.Fatal(err)
	}
	k := localsecrets.NewKeeper(key)
	t.Cleanup(func() { _ = k.Close() })
	return k
}

// TestKeysetUnderKMS: a keyset written under a KMS key holds no key in the
// clear, reads back with the same key and opens what the original sealed,
// and does not read under another key.
func TestKeysetUnderKMS(t *testing.T) {
	ctx := context.Background()
	kms := keeper(t)
	h, err := crypt.NewKeyset()
	if err != nil {
		t.Fatal(err)
	}
	var clear, sealed bytes.Buffer
	if err := crypt.WriteKeyset(h, &clear); err != nil {
		t.Fatal(err)
	}
	if err := cryptgocloud.WriteKeyset(ctx, kms, h, &sealed); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sealed.String(), "encryptedKeyset") || strings.Contains(sealed.String(), `"value"`) {
		t.Fatalf("the written keyset is not Tink's encrypted form:\n%s", sealed.String())
	}
	back, err := cryptgocloud.ReadKeyset(ctx, kms, bytes.NewReader(sealed.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	k1, err := crypt.New(h)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := crypt.New(back)
	if err != nil {
		t.Fatal(err)
	}
	env := &acemq.Envelope{ID: "m-1", Type: "T"}
	id, ct, err := k1.Seal(ctx, env, []byte("secret"), []byte("ad"))
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := k2.Open(ctx, env, id, ct, []byte("ad")); err != nil || string(pt) != "secret" {
		t.Fatalf("the keyset read back opens %q, %v", pt, err)
	}
	if _, err := cryptgocloud.ReadKeyset(ctx, keeper(t), bytes.NewReader(sealed.Bytes())); err == nil {
		t.Fatal("a keyset read under another KMS key")
	}
	if _, err := cryptgocloud.ReadKeyset(ctx, nil, &sealed); err == nil || !strings.Contains(err.Error(), "crypt/gocloud: ReadKeyset was given a nil keeper") {
		t.Fatalf("nil keeper: %v", err)
	}
}

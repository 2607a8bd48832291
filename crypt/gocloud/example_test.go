package gocloud_test

import (
	"bytes"
	"context"
	"fmt"
	"log"

	"github.com/acemq/acemq/crypt"
	cryptgocloud "github.com/acemq/acemq/crypt/gocloud"
	"gocloud.dev/secrets"
	_ "gocloud.dev/secrets/localsecrets" // base64key://; a service imports awskms, gcpkms, azurekeyvault or hashivault
)

// A keyset kept encrypted under a KMS key: written once by whoever makes
// the keys, read at start by every service.
func ExampleReadKeyset() {
	ctx := context.Background()
	kms, err := secrets.OpenKeeper(ctx, "base64key://") // e.g. "awskms://alias/acemq-keys?region=eu-west-1"
	if err != nil {
		log.Fatal(err)
	}
	defer kms.Close()

	h, err := crypt.NewKeyset()
	if err != nil {
		log.Fatal(err)
	}
	var file bytes.Buffer // a file, a secret store's entry
	if err := cryptgocloud.WriteKeyset(ctx, kms, h, &file); err != nil {
		log.Fatal(err)
	}

	read, err := cryptgocloud.ReadKeyset(ctx, kms, &file)
	if err != nil {
		log.Fatal(err)
	}
	keys, err := crypt.New(read) // acemq.WithBodyCipher(keys)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(keys.Primary() == h.KeysetInfo().GetPrimaryKeyId())
	// Output: true
}

package crypt_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/crypt"
)

// A Conn that seals every body it sends under a Tink keyset, and opens
// every body it receives.
func ExampleNew() {
	ctx := context.Background()
	h, err := crypt.NewKeyset() // in a service: crypt.ReadKeyset, or crypt/gocloud under a KMS key
	if err != nil {
		log.Fatal(err)
	}
	keys, err := crypt.New(h)
	if err != nil {
		log.Fatal(err)
	}
	c, err := acemq.Connect(ctx, "memory://", acemq.WithBodyCipher(keys))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	done := make(chan struct{})
	cons, err := acemq.NewConsumer(c, "payments", func(_ context.Context, m *acemq.Message[string]) acemq.Ack {
		fmt.Println("handled:", m.Payload)
		close(done)
		return acemq.Done()
	})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- cons.Run(runCtx) }()
	defer func() { stop(); <-stopped }()

	pub := acemq.NewPublisher[string](c, "", "payments")
	m, err := pub.Prepare(ctx, "card 4111 1111 1111 1111")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("key named in the header:", m.Envelope.Reserved()[acemq.CipherHeader] == fmt.Sprint(keys.Primary()))
	if err := c.PublishRaw(ctx, m); err != nil {
		log.Fatal(err)
	}
	<-done
	// Output:
	// key named in the header: true
	// handled: card 4111 1111 1111 1111
}

// Rotation without downtime, in three deployments: add the next key
// everywhere, promote it, and remove the old one once nothing it sealed
// waits anywhere (queues, .dlq, .parked, outbox rows, saga state).
func ExampleRotate() {
	h1, err := crypt.NewKeyset()
	if err != nil {
		log.Fatal(err)
	}
	keys, err := crypt.New(h1)
	if err != nil {
		log.Fatal(err)
	}
	old := keys.Primary()

	// 1. Every service gets the next key; they still seal with the old.
	h2, next, err := crypt.Rotate(h1, false)
	if err != nil {
		log.Fatal(err)
	}
	// 2. Once all have it, the next key becomes the primary: new sends
	// use it, and what the old one sealed still opens.
	h3, err := crypt.Promote(h2, next)
	if err != nil {
		log.Fatal(err)
	}
	if err := keys.Replace(h3); err != nil { // a running service, no restart
		log.Fatal(err)
	}
	// 3. When nothing sealed with the old key is left, remove it.
	h4, err := crypt.Remove(h3, old)
	if err != nil {
		log.Fatal(err)
	}
	if err := keys.Replace(h4); err != nil {
		log.Fatal(err)
	}
	fmt.Println("sealing with the next key:", keys.Primary() == next)
	// Output: sealing with the next key: true
}

// A key per tenant: deleting a tenant's keyset makes its messages
// unreadable wherever they were copied (crypto-shredding).
func ExamplePerSubject() {
	ctx := context.Background()
	keys := &crypt.MemorySubjectKeys{} // in a service: a SubjectKeys over its own key store
	cipher, err := crypt.PerSubject(keys, func(env *acemq.Envelope) string {
		tenant, _ := env.Headers["tenant"].(string)
		return tenant
	})
	if err != nil {
		log.Fatal(err)
	}
	c, err := acemq.Connect(ctx, "memory://", acemq.WithBodyCipher(cipher))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	pub := acemq.NewPublisher[string](c, "", "invoices")
	m, err := pub.Prepare(ctx, "invoice for t-42", acemq.Header("tenant", "t-42"))
	if err != nil {
		log.Fatal(err)
	}
	keyID := m.Envelope.Reserved()[acemq.CipherHeader].(string)
	fmt.Println("sealed under:", keyID[:len("t-42/")])

	keys.Delete("t-42") // the tenant asked to be forgotten
	_, err = acemq.OpenBody(ctx, cipher, m.Envelope, m.Body)
	fmt.Println(errors.Is(err, crypt.ErrUnknownKey))
	// Output:
	// sealed under: t-42/
	// true
}

// Large payloads streamed through package blob are encrypted in segments,
// so memory stays bounded however large they are.
func ExampleNewStore() {
	ctx := context.Background()
	streaming, err := crypt.NewStreamingKeyset()
	if err != nil {
		log.Fatal(err)
	}
	store, err := crypt.NewStore(blob.Memory(), streaming) // blob.Dir, blob.SQL, blob/gocloud alike
	if err != nil {
		log.Fatal(err)
	}
	// blob.NewPublisher(c, store, ...), blob.Handle(store, ...) and
	// blob.WithClaimCheck(store, 0) take it as any Store.
	info, err := store.Put(ctx, "scan-1", strings.NewReader("a scanned passport"), time.Time{})
	if err != nil {
		log.Fatal(err)
	}
	rc, err := store.Open(ctx, "scan-1", 0)
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	back, err := io.ReadAll(rc)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Size, string(back))
	// Output: 18 a scanned passport
}

package main

import (
	"context"
	"fmt"
	"os"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/crypt"
	"github.com/acemq/acemq/transport"
)

// readKeys reads peek's -keyset: nil for none.
func readKeys(path string) (acemq.BodyCipher, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("acemq: -keyset: %w", err)
	}
	defer f.Close()
	h, err := crypt.ReadKeyset(f)
	if err != nil {
		return nil, fmt.Errorf("acemq: -keyset %s: %w", path, err)
	}
	keys, err := crypt.New(h)
	if err != nil {
		return nil, fmt.Errorf("acemq: -keyset %s: %w", path, err)
	}
	return keys, nil
}

// sealedBody is the body to show of a delivery and, for a sealed one (it
// carries acemq.CipherHeader), what to say of it: opened with the keyset,
// or encrypted and not shown, or not opening and why. A claim check's
// body is the claim, which travels in the clear (its object is sealed).
func sealedBody(ctx context.Context, env *acemq.Envelope, d transport.Delivery, keys acemq.BodyCipher) (body []byte, note string) {
	keyID, _ := env.Reserved()[acemq.CipherHeader].(string)
	switch {
	case keyID == "":
		return d.Body, ""
	case d.ContentType == acemq.ClaimCheckContentType:
		return d.Body, fmt.Sprintf("key %s: the stored object is encrypted; the claim below is not", keyID)
	case keys == nil:
		return nil, fmt.Sprintf("key %s: the body is encrypted; give -keyset FILE to read it", keyID)
	}
	opened, err := acemq.OpenBody(ctx, keys, env, d.Body)
	if err != nil {
		return nil, fmt.Sprintf("key %s: does not open with -keyset: %v", keyID, err)
	}
	return opened, fmt.Sprintf("key %s: opened with -keyset", keyID)
}

// reportSealed is what replay -keyset does before it moves anything: it
// looks at the messages at the head of queue (at most limit, held and put
// back in order), opens each sealed one with keys, and prints those that
// do not open (their key removed or shredded, their body changed): moved,
// they would only be parked again. Nothing is moved or acked.
func (c *cli) reportSealed(ctx context.Context, mq *acemq.Conn, queue string, keys acemq.BodyCipher, limit int) error {
	var held []transport.Delivery
	defer func() {
		for i := len(held) - 1; i >= 0; i-- {
			_ = held[i].Nack(true) // a failed nack: the broker returns it when the channel closes
		}
	}()
	sealed, closed := 0, 0
	for len(held) < limit {
		d, ok, err := mq.Transport().Get(ctx, queue)
		if err != nil {
			return fmt.Errorf("acemq: replay: looking at %s: %w", queue, err)
		}
		if !ok {
			break
		}
		held = append(held, d)
		env, err := acemq.EnvelopeOf(d.Message)
		if err != nil {
			continue // replay reports it as failed
		}
		keyID, _ := env.Reserved()[acemq.CipherHeader].(string)
		if keyID == "" || d.ContentType == acemq.ClaimCheckContentType {
			continue
		}
		sealed++
		if _, err := acemq.OpenBody(ctx, keys, env, d.Body); err != nil {
			closed++
			fmt.Fprintf(c.stdout, "does not open: message %s (key %s): %s\n", safe(env.ID), safe(keyID), safe(err.Error()))
		}
	}
	fmt.Fprintf(c.stdout, "%s sealed, %d of them not opening with -keyset (they will be parked again)\n", plural(sealed, "message"), closed)
	return nil
}

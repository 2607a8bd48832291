// Package crypt encrypts acemq message bodies end to end with AEAD
// (AES-256-GCM), using Tink (github.com/tink-crypto/tink-go/v2) for the
// keys: no primitive of its own.
//
// # Bodies
//
// New returns a cipher over a Tink keyset; acemq.WithBodyCipher gives it to
// a Conn, which then seals every body it encodes and opens every body it
// decodes. The key's Tink ID travels in the reserved header
// acemq.CipherHeader; the rest of the envelope stays readable, for routing.
// The envelope's ID and type are the associated data, so a body moved onto
// another message does not open. A sealed body stays sealed wherever it is
// copied: the queue, the retry tiers, .dlq and .parked, an outbox row (the
// outbox stores what Prepare sealed), a claim-checked object.
//
// # Rotation
//
// Rotate adds a key, Promote makes it the one new sends use, Remove drops
// one; every key of the keyset opens what it sealed until it is removed.
// Keys.Replace takes a new keyset in a running service. A delivery sealed
// with a key the keyset no longer holds is parked with ErrUnknownKey and
// the key's ID in its reason; one that fails authentication (changed, or
// moved onto another envelope) with ErrAuthentication; one in the clear
// with ErrNotSealed, unless AllowPlain (for a migration).
//
// # Keys per subject
//
// PerSubject seals each message under the keyset of its subject (a tenant,
// a customer), chosen by a function of its envelope, from a SubjectKeys.
// Deleting a subject's keyset (crypto-shredding) leaves its messages
// unreadable wherever they were copied; they park, and every other
// subject's are handled. The headers, which stay readable, and what the
// service itself writes to its logs are not covered.
//
// # Streams and state
//
// Store wraps a blob.Store with Tink's streaming AEAD (AES-256-GCM-HKDF,
// 1 MiB segments), so a payload of any size is encrypted in bounded
// memory. saga.WithStateCipher seals a saga's state in its table. The
// keysets themselves can be kept under a KMS key with package
// crypt/gocloud, a module of its own.
//
// docs/encryption.md shows the setup, the costs measured and what the
// acemq CLI shows of a sealed body (peek -keyset).
package crypt

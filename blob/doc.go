// Package blob carries payloads too large for one message: the bytes go to a
// [Store] as a stream, and a small message names them.
//
// # Stores
//
// A [Store] keeps objects by ID. Every store makes the same promises, which
// the conformance suite in blob/blobtest checks:
//
//   - Put reads all of its reader before the object becomes visible; a Put
//     that fails (the reader's error, a cancelled ctx, a full disk) leaves
//     nothing that Open can read.
//   - Open streams from an offset without loading the whole object, and
//     returns [ErrNotFound] for an object that is absent or past its expiry.
//   - Delete of an absent object is not an error.
//   - Expired lists the objects whose expiry is before a time: what [Sweep]
//     may delete. Nothing else is ever deleted by a sweep, and one entry
//     the listing cannot read (a Dir store's corrupt sidecar) is reported
//     and skipped, never the end of the sweep.
//
// The stores shipped here are [Memory] (tests and the memory transport),
// [Dir] (a directory on a local or shared file system) and [SQLDB] (chunk
// rows in the service's own PostgreSQL or SQLite, the outbox's database or
// any other; its [SQLStore.Migrate] creates the tables). Cloud buckets (S3, GCS, Azure)
// are served by the module github.com/acemq/acemq/blob/gocloud, kept apart
// so that its SDKs never enter this module. Each streams in pieces of
// [ChunkSize] bytes: no store built here holds a whole object in memory,
// except Memory.
//
// A store of your own passes the conformance suite in package
// github.com/acemq/acemq/blob/blobtest; [CopyContext] and
// [NewContextReader] copy and read as the stores here do.
//
// # Expiry
//
// Every object has an expiry, given to Put. A store never deletes an object
// on its own: an expired object is only hidden from Open, and stays on disk
// (or in its table or bucket) until [Sweep] or Delete removes it. The zero
// time means the object never expires. Stores compare expiries with this
// process's clock.
//
// # Counting bytes
//
// [Counted] wraps any store and reports the bytes it stores and the bytes
// read from it to a [Counter] of the caller's, never to a global registry:
// two wrappers of one store count apart.
//
// # Sending and handling a payload
//
// [Publisher.Send] streams an io.Reader into a store and then publishes a
// small message, an [Envelope] of the caller's metadata and the object's
// [Ref], through an ordinary acemq.Publisher (interceptors, confirms,
// mandatory routing); a failed publish deletes the object. [Put] does the
// first half alone, for a send through an outbox. [Handle] turns a
// [Handler] into the acemq.Handler of the Envelope: the handler reads the
// object through a [Reader], which reads at most two chunks ahead and
// returns io.EOF only once the size and SHA-256 match the Ref; a corrupt
// object ([ErrCorrupt]) or a gone one goes to the queue's .dlq. Every
// delivery reads the object afresh, so retries and replays see it whole,
// and nothing is acked before the handler returned.
//
// The default expiry ([DefaultExpiry]) is the consumers' retry ladder plus
// a week in .dlq or .parked: an object outlives every delivery of its
// message. [DeleteOnDone] deletes it once its message is acked.
//
// # Claim checks
//
// [WithClaimCheck] makes a Conn store every encoded body over a threshold
// and send its Ref instead, and load it back before the decode, so any
// acemq.Publisher and Consumer of T carry large values unchanged. The
// consumer's MaxBodySize holds for the loaded body, whatever size the
// claim gives: a claim over it, or one whose object is not the size it
// names, is parked, and the load never allocates more than the bytes that
// arrive. An object gone or corrupt goes to .dlq at once. [DeleteOnDone]
// given to WithClaimCheck deletes each object once its message is acked.
//
// docs/payloads.md has the whole story: which store when, expiry, limits.
package blob

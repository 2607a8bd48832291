// Package blobtest is the conformance suite every blob.Store passes, in the
// manner of testing/slogtest and acemq's transport/transporttest: a store's
// own test calls Run with a way to make an empty store, and the suite
// checks the promises of the blob.Store interface, each in its own subtest.
//
//	func TestConformance(t *testing.T) {
//		blobtest.Run(t, func(*testing.T) blob.Store { return blob.Memory() }, blobtest.InMemory())
//	}
//
// # What it checks
//
//   - Put returns the size and SHA-256 of what it read, and Open gives the
//     bytes back, from offset 0, from within a chunk, from a chunk boundary,
//     from the last byte, from the end and from past the end (io.EOF at once).
//   - A Put whose reader fails mid-way, or whose ctx is cancelled mid-way,
//     returns that error and leaves nothing readable: neither a new object
//     nor a change to the one already stored under the ID.
//   - Open of an absent, deleted or expired object fails with
//     blob.ErrNotFound; Delete is idempotent; Expired lists exactly the
//     objects whose expiry is before the given time, never one without an
//     expiry.
//   - Every method honours its ctx, and so do the readers Open returns: a
//     Read after the ctx is cancelled fails with the ctx's error.
//   - Concurrent Puts of different IDs and of one ID (run it with -race):
//     each object whole, and the one ID holding exactly one Put's bytes;
//     readers racing with those Puts read one Put's bytes whole or fail
//     with blob.ErrNotFound (with ReadsMayFailDuringReplace, with any
//     error).
//   - A large object (64 MiB unless LargeSize or -short says otherwise) streamed in
//     and out from a generator, with the Go heap (runtime/metrics, sampled)
//     staying under 24 MiB above where it started, on the way in unless the
//     store keeps its objects in memory (InMemory), and on the way out for
//     every store.
//
// # What it asks of the store
//
// newStore is called once per subtest and must return a store holding no
// object (a fresh directory, table or bucket); the suite deletes nothing
// afterwards. Subtests run in parallel, except the large one, which runs
// alone first so that its heap samples see only itself.
package blobtest

import (
	"testing"

	"github.com/acemq/acemq/blob"
)

// Option adjusts what Run expects of a store.
type Option func(*config)

type config struct {
	inMemory    bool
	racyReplace bool
	largeSize   int64
}

// InMemory says the store keeps its objects in the process's memory (as
// blob.Memory does): the large subtest then bounds the heap only while the
// object is read, not while it is stored.
func InMemory() Option { return func(c *config) { c.inMemory = true } }

// ReadsMayFailDuringReplace says that a read racing with a Put of the same
// ID may fail with any error (gocloud's fileblob rewrites its metadata
// sidecar in place). Such a read must still never return bytes that no Put
// wrote, and the ID must end up holding one Put's bytes whole.
func ReadsMayFailDuringReplace() Option { return func(c *config) { c.racyReplace = true } }

// LargeSize sets the size of the large subtest's object; the default is 64
// MiB, and 8 MiB with go test -short. Sizes under 4 MiB are raised to 4 MiB.
func LargeSize(n int64) Option { return func(c *config) { c.largeSize = max(n, 4<<20) } }

// Run runs the conformance suite against the stores newStore makes.
func Run(t *testing.T, newStore func(t *testing.T) blob.Store, opts ...Option) {
	t.Helper()
	cfg := config{largeSize: 64 << 20}
	if testing.Short() {
		cfg.largeSize = 8 << 20
	}
	for _, o := range opts {
		o(&cfg)
	}
	s := suite{cfg: cfg, newStore: newStore}
	t.Run("Large", s.large)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"RoundTrip", s.roundTrip},
		{"OpenAtOffset", s.openAtOffset},
		{"BadArguments", s.badArguments},
		{"NotFoundAndDelete", s.notFoundAndDelete},
		{"Replace", s.replace},
		{"FailingReader", s.failingReader},
		{"CancelledMidPut", s.cancelledMidPut},
		{"CancelledContext", s.cancelledContext},
		{"CancelledMidRead", s.cancelledMidRead},
		{"Expiry", s.expiry},
		{"ExpiredIteration", s.expiredIteration},
		{"ConcurrentPutsOfDifferentIDs", s.concurrentDifferent},
		{"ConcurrentPutsOfOneID", s.concurrentSame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type suite struct {
	cfg      config
	newStore func(t *testing.T) blob.Store
}

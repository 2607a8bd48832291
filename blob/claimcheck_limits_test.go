package blob_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/stretchr/testify/require"
)

// sendClaim publishes a claim-checked message whose claim is ref, as a
// sender that lies, or a tool, would: the body that travels is the Ref.
func sendClaim(t *testing.T, c *acemq.Conn, q string, ref blob.Ref) {
	t.Helper()
	claim, err := json.Marshal(ref)
	require.NoError(t, err)
	require.NoError(t, c.PublishRaw(t.Context(), acemq.RawMessage{
		RoutingKey: q, Envelope: &acemq.Envelope{ID: "claim-" + ref.ID[:min(8, len(ref.ID))], Version: 1, Attempt: 1},
		Body: claim, ContentType: acemq.ClaimCheckContentType,
	}))
}

// landed takes the message from queue (a .parked or .dlq queue) and
// returns the reason it carries.
func landed(t *testing.T, c *acemq.Conn, queue string) string {
	t.Helper()
	var reason string
	require.Eventually(t, func() bool {
		d, ok, err := c.Transport().Get(t.Context(), queue)
		require.NoError(t, err)
		if !ok {
			return false
		}
		require.NoError(t, d.Ack())
		reason, _ = d.Headers["x-acemq-error"].(string)
		return true
	}, 10*time.Second, 10*time.Millisecond, "nothing in %s", queue)
	return reason
}

// TestClaimCheckTrustsNoSize: a claim naming 1 GiB for a 4-byte object
// allocates nothing like 1 GiB, whatever the consumer's limit: over the
// limit it is parked before anything is read; under it, the load reads the
// 4 bytes into a buffer that grows as they come, finds the sizes differ
// and parks it. A real object over MaxBodySize, and one holding more than
// its claim says, are parked too, each with a reason naming both sizes.
func TestClaimCheckTrustsNoSize(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			s := blob.Memory()
			tiny, err := blob.Put(t.Context(), s, strings.NewReader("tiny"))
			require.NoError(t, err)
			big, err := blob.Put(t.Context(), s, payload(3, 300<<10))
			require.NoError(t, err)
			lying, small := tiny, big
			lying.Size = 1 << 30
			small.Size = 4
			for _, tc := range []struct {
				name  string
				ref   blob.Ref
				limit int
				want  []string
			}{
				{"1 GiB claim, default limit", lying, 0, []string{"names 1073741824 bytes, over this consumer's limit of 16777216"}},
				{"1 GiB claim, 2 GiB limit", lying, 2 << 30, []string{"names 1073741824 bytes, but the object holds 4"}},
				{"object over the limit", big, 100 << 10, []string{"names 307200 bytes, over this consumer's limit of 102400"}},
				{"object holding more than its claim", small, 100 << 10, []string{"holds more than this consumer's limit of 102400 bytes", "its claim names 4"}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					st, hook := newSettlements()
					c := connect(t, url, blob.WithClaimCheck(s, 0), hook)
					q := queue(t, url, "blob-claimsize")
					var opts []acemq.ConsumerOption
					if tc.limit > 0 {
						opts = append(opts, acemq.MaxBodySize(tc.limit))
					}
					var ran atomic.Bool
					run(t, c, q, func(context.Context, *acemq.Message[Report]) acemq.Ack {
						ran.Store(true)
						return acemq.Done()
					}, opts...)
					runtime.GC()
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					sendClaim(t, c, q, tc.ref)
					got := st.next(t, 10*time.Second)
					runtime.ReadMemStats(&after)
					alloc := after.TotalAlloc - before.TotalAlloc
					t.Logf("allocated %.2f MiB sending and settling it", float64(alloc)/(1<<20))
					require.Less(t, alloc, uint64(8<<20), "allocated while loading a claim of %d bytes", tc.ref.Size)
					require.Equal(t, acemq.OutcomeParked, got.Outcome, got.Reason)
					require.Equal(t, 1, got.Attempt)
					require.False(t, ran.Load(), "the handler never runs")
					reason := landed(t, c, acemq.ParkingQueue(q))
					for _, w := range tc.want {
						require.Contains(t, got.Reason, w)
						require.Contains(t, reason, w)
					}
				})
			}
			require.Len(t, ids(t, s), 2, "a parked claim's object is kept, for a replay")
		})
	}
}

// TestClaimCheckWithinTheLimit: a body loaded whole within MaxBodySize
// decodes as before, on a consumer whose limit is just its size.
func TestClaimCheckWithinTheLimit(t *testing.T) {
	url := brokers[0].url(t)
	s := blob.Memory()
	c := connect(t, url, blob.WithClaimCheck(s, 1000))
	q := queue(t, url, "blob-claimfits")
	want := Report{Title: "fits", Rows: bytes.Repeat([]byte("r"), 200<<10)}
	encoded, err := json.Marshal(want)
	require.NoError(t, err)
	got := make(chan Report, 1)
	run(t, c, q, func(_ context.Context, m *acemq.Message[Report]) acemq.Ack {
		got <- m.Payload
		return acemq.Done()
	}, acemq.MaxBodySize(len(encoded)))
	require.NoError(t, acemq.NewPublisher[Report](c, "", q).Send(t.Context(), want))
	select {
	case r := <-got:
		require.Equal(t, want, r)
	case <-time.After(10 * time.Second):
		t.Fatal("not handled")
	}
}

// TestPermanentFailuresGoToTheDLQAtOnce: what no retry can fix (an object
// whose sidecar is corrupt, a Ref ID too long for the Dir store, an object
// gone, an object whose bytes are not its digest) sends the message to
// .dlq on its first attempt, without running the handler, through Handle
// and as a claim check alike.
func TestPermanentFailuresGoToTheDLQAtOnce(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			dir := t.TempDir()
			s, err := blob.Dir(dir)
			require.NoError(t, err)
			corrupt, err := blob.Put(t.Context(), s, payload(5, 2000))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, corrupt.ID+".meta"), []byte("{not json"), 0o644))
			altered, err := blob.Put(t.Context(), s, payload(6, 2000))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, altered.ID), bytes.Repeat([]byte("x"), 2000), 0o644))
			sum := sha256.Sum256([]byte("x"))
			long := blob.Ref{ID: strings.Repeat("L", 300), Size: 1, SHA256: hex.EncodeToString(sum[:])}
			gone := blob.Ref{ID: "never-stored", Size: 1, SHA256: hex.EncodeToString(sum[:])}
			cases := []struct {
				name string
				ref  blob.Ref
				want string
			}{
				{"corrupt sidecar", corrupt, "blob: object corrupt"},
				{"altered bytes", altered, "blob: object corrupt"},
				{"ID too long", long, "too long for a Dir store"},
				{"gone", gone, "is gone"},
			}
			for _, tc := range cases {
				t.Run("Handle/"+tc.name, func(t *testing.T) {
					st, hook := newSettlements()
					c := connect(t, url, hook)
					q := queue(t, url, "blob-permanent")
					var ran atomic.Bool
					run(t, c, q, blob.Handle(s, func(_ context.Context, _ *acemq.Message[meta], body *blob.Reader) acemq.Ack {
						ran.Store(true)
						_, _, err := readAll(body)
						if errors.Is(err, blob.ErrCorrupt) {
							return acemq.Retry(err) // Handle dead-letters it all the same
						}
						return acemq.Done()
					}))
					require.NoError(t, acemq.NewPublisher[blob.Envelope[meta]](c, "", q).Send(t.Context(), blob.Envelope[meta]{Ref: tc.ref}))
					got := st.next(t, 10*time.Second)
					require.Equal(t, acemq.OutcomeDeadLettered, got.Outcome, got.Reason)
					require.Equal(t, 1, got.Attempt, "the first attempt")
					require.Contains(t, got.Reason, tc.want)
					require.Contains(t, landed(t, c, acemq.DeadLetterQueue(q)), tc.want)
					if tc.name != "altered bytes" { // found corrupt only by reading
						require.False(t, ran.Load(), "the handler never runs")
					}
				})
				t.Run("claim check/"+tc.name, func(t *testing.T) {
					st, hook := newSettlements()
					c := connect(t, url, blob.WithClaimCheck(s, 0), hook)
					q := queue(t, url, "blob-permanent")
					var ran atomic.Bool
					run(t, c, q, func(context.Context, *acemq.Message[Report]) acemq.Ack {
						ran.Store(true)
						return acemq.Done()
					})
					sendClaim(t, c, q, tc.ref)
					got := st.next(t, 10*time.Second)
					require.Equal(t, acemq.OutcomeDeadLettered, got.Outcome, got.Reason)
					require.Equal(t, 1, got.Attempt, "the first attempt")
					require.Contains(t, got.Reason, tc.want)
					require.Contains(t, landed(t, c, acemq.DeadLetterQueue(q)), tc.want)
					require.False(t, ran.Load(), "the handler never runs")
				})
			}
		})
	}
}

// TestClaimCheckDeleteOnDone: with DeleteOnDone, a consumer deletes a
// claim-checked object once its handler returned Done and the message was
// acked; a message whose handler fails keeps its object through every
// retry and in .dlq.
func TestClaimCheckDeleteOnDone(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			s := blob.Memory()
			st, hook := newSettlements()
			sender := connect(t, url, blob.WithClaimCheck(s, 1000))
			c := connect(t, url, blob.WithClaimCheck(s, 1000, blob.DeleteOnDone()), hook)
			q := queue(t, url, "blob-claimdelete")
			type seen struct {
				title   string
				objects int
			}
			handled := make(chan seen, 16)
			run(t, c, q, func(_ context.Context, m *acemq.Message[Report]) acemq.Ack {
				handled <- seen{m.Payload.Title, len(ids(t, s))}
				if m.Payload.Title == "fails" {
					return acemq.Retry(errors.New("failing every time"))
				}
				return acemq.Done()
			})
			p := acemq.NewPublisher[Report](sender, "", q)
			rows := bytes.Repeat([]byte("r"), 5000)

			require.NoError(t, p.Send(t.Context(), Report{Title: "fails", Rows: rows}))
			for attempt := 1; attempt <= fastRetry.MaxAttempts; attempt++ {
				h := <-handled
				require.Equal(t, seen{"fails", 1}, h, "attempt %d finds its object", attempt)
				got := st.next(t, 10*time.Second)
				require.Equal(t, attempt, got.Attempt)
				if attempt < fastRetry.MaxAttempts {
					require.Equal(t, acemq.OutcomeRetried, got.Outcome)
				} else {
					require.Equal(t, acemq.OutcomeDeadLettered, got.Outcome)
				}
			}
			failed := ids(t, s)
			require.Len(t, failed, 1, "a dead-lettered message keeps its object")

			require.NoError(t, p.Send(t.Context(), Report{Title: "done", Rows: rows}))
			require.Equal(t, seen{"done", 2}, <-handled)
			require.Equal(t, acemq.OutcomeAcked, st.next(t, 10*time.Second).Outcome)
			require.Eventually(t, func() bool { return len(ids(t, s)) == 1 }, 5*time.Second, 10*time.Millisecond, "the acked message's object is deleted")
			require.Equal(t, failed, ids(t, s))
		})
	}
}

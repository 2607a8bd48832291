package crypt_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/crypt"
	"github.com/stretchr/testify/require"
)

// doc is the metadata of a streamed payload in these tests.
type doc struct{ Name string }

func newStore(t testing.TB, inner blob.Store) *crypt.Store {
	t.Helper()
	h, err := crypt.NewStreamingKeyset()
	require.NoError(t, err)
	s, err := crypt.NewStore(inner, h)
	require.NoError(t, err)
	return s
}

// readAll reads an object of inner as it is stored.
func readAll(t *testing.T, s blob.Store, id string) []byte {
	t.Helper()
	rc, err := s.Open(t.Context(), id, 0)
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

// TestStoreStreams: a payload streamed through blob with a crypt.Store is
// stored encrypted (the wrapped store holds no plaintext, the message's
// body neither) and handled whole, its size and SHA-256 checked; an
// offset reads from there.
func TestStoreStreams(t *testing.T) {
	eachBroker(t, func(t *testing.T, url string) {
		ctx := t.Context()
		inner := blob.Memory()
		s := newStore(t, inner)
		k, _ := newKeys(t)
		got, onSettled := newSettlements()
		c := connect(t, url, acemq.WithBodyCipher(k), onSettled)
		q := consumerQueue(t, url, "crypt-blob")
		body := bytes.Repeat([]byte(marker+" "), 300_000) // ~6.6 MB, several segments
		read := make(chan []byte, 1)
		cons, err := acemq.NewConsumer(c, q, blob.Handle(s, func(_ context.Context, m *acemq.Message[doc], r *blob.Reader) acemq.Ack {
			b, err := io.ReadAll(r)
			if err != nil {
				return acemq.Retry(err)
			}
			read <- b
			return acemq.Done()
		}))
		require.NoError(t, err)
		ref, err := blob.NewPublisher[doc](c, s, "", q).Send(ctx, doc{Name: marker}, bytes.NewReader(body))
		require.NoError(t, err)
		require.Equal(t, int64(len(body)), ref.Size, "the Ref describes the plaintext")
		sum := sha256.Sum256(body)
		require.Equal(t, sum[:], mustHex(t, ref.SHA256))

		stored := readAll(t, inner, ref.ID)
		require.NotContains(t, string(stored), marker, "plaintext in the wrapped store")
		require.Greater(t, len(stored), len(body), "the stored object carries the AEAD's header and tags")
		// The message's body (meta and Ref) is sealed too.
		d := getNoAck(t, c, q)
		require.NotContains(t, string(d.Body), marker)
		require.NoError(t, d.Nack(true))

		run(t, cons)
		require.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
		require.Equal(t, body, <-read)

		rc, err := s.Open(ctx, ref.ID, int64(len(body)-10))
		require.NoError(t, err)
		tail, err := io.ReadAll(rc)
		require.NoError(t, err)
		require.NoError(t, rc.Close())
		require.Equal(t, body[len(body)-10:], tail)
	})
}

// TestStoreRefusesChangedOrMovedObjects: an object with one byte changed,
// or copied under another ID, fails its read with ErrCorrupt and
// ErrAuthentication.
func TestStoreRefusesChangedOrMovedObjects(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	inner := blob.Memory()
	s := newStore(t, inner)
	body := strings.Repeat("x", 3<<20)
	_, err := s.Put(ctx, "a", strings.NewReader(body), time.Time{})
	require.NoError(t, err)
	stored := readAll(t, inner, "a")

	moved := bytes.Clone(stored)
	_, err = inner.Put(ctx, "b", bytes.NewReader(moved), time.Time{})
	require.NoError(t, err)
	changed := bytes.Clone(stored)
	changed[len(changed)/2] ^= 1
	_, err = inner.Put(ctx, "c", bytes.NewReader(changed), time.Time{})
	require.NoError(t, err)
	for _, id := range []string{"b", "c"} {
		rc, err := s.Open(ctx, id, 0)
		if err == nil {
			_, err = io.ReadAll(rc)
			_ = rc.Close()
		}
		require.ErrorIs(t, err, blob.ErrCorrupt, id)
		require.ErrorIs(t, err, crypt.ErrAuthentication, id)
	}
	_, err = crypt.NewStore(nil, nil)
	require.ErrorContains(t, err, "crypt: NewStore was given a nil")
}

// TestChangedObjectGoesToDLQ: an encrypted object changed at rest fails
// the handler's read as corrupt, and its message goes to .dlq with that
// reason, as any corrupt object's does.
func TestChangedObjectGoesToDLQ(t *testing.T) {
	url := brokers[0].url(t)
	ctx := t.Context()
	inner := blob.Memory()
	s := newStore(t, inner)
	got, onSettled := newSettlements()
	c := connect(t, url, onSettled)
	q := consumerQueue(t, url, "crypt-blob-corrupt")
	cons, err := acemq.NewConsumer(c, q, blob.Handle(s, func(_ context.Context, _ *acemq.Message[doc], r *blob.Reader) acemq.Ack {
		_, err := io.Copy(io.Discard, r)
		return acemq.AckOf(err)
	}))
	require.NoError(t, err)
	ref, err := blob.NewPublisher[doc](c, s, "", q).Send(ctx, doc{}, strings.NewReader(strings.Repeat("y", 2<<20)))
	require.NoError(t, err)
	stored := readAll(t, inner, ref.ID)
	stored[len(stored)-100] ^= 1
	_, err = inner.Put(ctx, ref.ID, bytes.NewReader(stored), time.Time{})
	require.NoError(t, err)
	run(t, cons)
	st := got.next(t)
	require.Equal(t, acemq.OutcomeDeadLettered, st.Outcome, st.Reason)
	require.Contains(t, st.Reason, "blob: object corrupt")
	require.Contains(t, st.Reason, "crypt: the body failed authentication")
}

// TestStoreMemoryIsBounded: 96 MiB put through a crypt.Store into a Dir
// store and read back whole grows the heap by far less than the payload:
// the streaming AEAD works a segment at a time.
func TestStoreMemoryIsBounded(t *testing.T) {
	const size = 96 << 20
	dir, err := blob.Dir(t.TempDir())
	require.NoError(t, err)
	s := newStore(t, dir)
	ctx := t.Context()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	info, err := s.Put(ctx, "big", io.LimitReader(zeroReader{}, size), time.Time{})
	require.NoError(t, err)
	require.Equal(t, int64(size), info.Size)
	rc, err := s.Open(ctx, "big", 0)
	require.NoError(t, err)
	n, err := io.Copy(io.Discard, rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	close(stop)
	<-sampled
	require.Equal(t, int64(size), n)
	grew := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("heap grew by %d MiB", grew>>20)
	require.Less(t, grew, int64(24<<20), "the heap grew by %d MiB for a %d MiB payload", grew>>20, size>>20)
}

// zeroReader reads as endless zero bytes.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

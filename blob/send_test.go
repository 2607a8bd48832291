package blob_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/stretchr/testify/require"
)

// handled is what a test handler saw of one payload.
type handled struct {
	meta   meta
	n      int64
	digest string
	err    error // what the last Read returned: io.EOF when whole
}

// readAll reads body to its end with a small buffer, hashing what it got.
func readAll(body io.Reader) (int64, string, error) {
	h := sha256.New()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		k, err := body.Read(buf)
		h.Write(buf[:k])
		n += int64(k)
		if err != nil {
			return n, hex.EncodeToString(h.Sum(nil)), err
		}
	}
}

func TestSendAndHandle(t *testing.T) {
	sizes := []int64{0, 1, blob.ChunkSize - 1, blob.ChunkSize, 2*blob.ChunkSize + 7, 5<<20 + 3}
	eachPlace(t, func(t *testing.T, url string, s blob.Store) {
		c := connect(t, url)
		q := queue(t, url, "blob-send")
		got := make(chan handled, len(sizes))
		run(t, c, q, blob.Handle(s, func(ctx context.Context, m *acemq.Message[meta], body *blob.Reader) acemq.Ack {
			n, d, err := readAll(body)
			got <- handled{meta: m.Payload, n: n, digest: d, err: err}
			return acemq.Done()
		}))
		p := blob.NewPublisher[meta](c, s, "", q)
		for i, size := range sizes {
			ref, err := p.Send(t.Context(), meta{Name: "p", Seed: uint64(i)}, payload(uint64(i), size))
			require.NoError(t, err)
			require.Equal(t, size, ref.Size)
			require.Equal(t, digest(t, uint64(i), size), ref.SHA256)
			require.WithinDuration(t, time.Now().Add(blob.DefaultExpiry(acemq.DefaultRetryPolicy())), ref.Expires, time.Minute)
		}
		seen := map[uint64]handled{}
		for range sizes {
			select {
			case h := <-got:
				seen[h.meta.Seed] = h
			case <-time.After(20 * time.Second):
				t.Fatal("not every payload was handled")
			}
		}
		for i, size := range sizes {
			h := seen[uint64(i)]
			require.ErrorIs(t, h.err, io.EOF, "payload %d", i)
			require.Equal(t, size, h.n)
			require.Equal(t, digest(t, uint64(i), size), h.digest)
		}
	})
}

// TestSendWritesTheEnvelopeType: the small message is typed as
// Envelope[M] and carries the Ref, which RefOf finds in the body.
func TestSendWritesTheEnvelopeType(t *testing.T) {
	url := "memory://"
	c := connect(t, url)
	q := queue(t, url, "blob-type")
	raw := make(chan acemq.Message[acemq.Raw], 1)
	run(t, c, q, func(_ context.Context, m *acemq.Message[acemq.Raw]) acemq.Ack {
		raw <- *m
		return acemq.Done()
	})
	ref, err := blob.NewPublisher[meta](c, blob.Memory(), "", q).Send(t.Context(), meta{Name: "x"}, payload(1, 10))
	require.NoError(t, err)
	m := <-raw
	require.Equal(t, "Envelope[github.com/acemq/acemq/blob_test.meta]", m.Envelope.Type)
	got, ok := blob.RefOf("application/json", m.Payload)
	require.True(t, ok)
	require.Equal(t, ref.ID, got.ID)
	require.Equal(t, ref.SHA256, got.SHA256)
	require.True(t, ref.Expires.Equal(got.Expires))
	_, ok = blob.RefOf("application/json", []byte(`{"meta":{}}`))
	require.False(t, ok)
}

func TestSendBadInput(t *testing.T) {
	ctx := t.Context()
	url := "memory://"
	c := connect(t, url)
	q := queue(t, url, "blob-bad")
	// A queue, so that a message that was sent would be routable and seen.
	require.NoError(t, c.Declare(ctx, acemq.Queue{Name: q}))

	cases := []struct {
		name  string
		body  func(cancel context.CancelFunc) io.Reader
		store func(blob.Store) blob.Store
		want  string
		is    error
	}{
		{name: "nil reader", body: func(context.CancelFunc) io.Reader { return nil }, want: "blob: the body is a nil io.Reader"},
		{name: "reader fails mid-put", body: func(context.CancelFunc) io.Reader {
			return io.MultiReader(payload(1, 3<<20), errReader{errBoom})
		}, want: "blob: storing object", is: errBoom},
		{name: "ctx cancelled mid-stream", body: func(cancel context.CancelFunc) io.Reader {
			return io.MultiReader(payload(1, 2<<20), cancelReader{cancel}, payload(2, 2<<20))
		}, want: "blob: storing object", is: context.Canceled},
		{name: "store fails mid-put", body: func(context.CancelFunc) io.Reader { return payload(1, 3<<20) },
			store: func(s blob.Store) blob.Store { return failingPut{s} }, want: "blob: storing object", is: errBoom},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := blob.Memory()
			use := s
			if tc.store != nil {
				use = tc.store(s)
			}
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			_, err := blob.NewPublisher[meta](c, use, "", q).Send(sctx, meta{}, tc.body(cancel))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
			require.Empty(t, ids(t, s), "nothing half-visible")
			n, err := queueDepth(ctx, c, q)
			require.NoError(t, err)
			require.Zero(t, n, "nothing sent")
		})
	}
}

// TestFailedPublishDeletesTheObject: an unroutable message (mandatory)
// fails Send, and the object it named is deleted.
func TestFailedPublishDeletesTheObject(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			c := connect(t, url)
			s := blob.Memory()
			_, err := blob.NewPublisher[meta](c, s, "", queue(t, url, "blob-nowhere")).Send(t.Context(), meta{}, payload(1, 1<<20))
			require.ErrorIs(t, err, acemq.ErrUnroutable)
			require.Contains(t, err.Error(), "blob: the message of object")
			require.Empty(t, ids(t, s))
		})
	}
}

func queueDepth(ctx context.Context, c *acemq.Conn, q string) (int, error) {
	info, err := c.Transport().Inspect(ctx, q)
	return info.Messages, err
}

var errBoom = errors.New("boom")

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// cancelReader cancels the Send's ctx when the Put reaches it.
type cancelReader struct{ cancel context.CancelFunc }

func (r cancelReader) Read([]byte) (int, error) { r.cancel(); return 0, io.EOF }

// failingPut is a store whose Put fails after reading 1 MiB.
type failingPut struct{ blob.Store }

func (f failingPut) Put(ctx context.Context, id string, r io.Reader, expires time.Time) (blob.Info, error) {
	return f.Store.Put(ctx, id, io.MultiReader(io.LimitReader(r, 1<<20), errReader{errBoom}), expires)
}

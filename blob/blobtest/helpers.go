package blobtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/acemq/acemq/blob"
)

// chunk is the unit the sizes below are measured in: the stores' own
// (blob.ChunkSize), so that the suite crosses their chunk boundaries.
const chunk = blob.ChunkSize

// newID returns an ID no other subtest uses, with characters a store must
// accept: upper case, a dot, a slash and a space besides the usual ones.
func newID(t *testing.T, what string) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "bt." + what + "/Obj " + hex.EncodeToString(b[:])
}

// payload returns n deterministic bytes that differ by seed.
func payload(seed uint64, n int64) []byte {
	b := make([]byte, n)
	g := &genReader{state: seed | 1, left: n}
	if _, err := io.ReadFull(g, b); err != nil {
		panic(err)
	}
	return b
}

// genReader yields left pseudo-random bytes (xorshift64) without holding
// them: the source of the large object. The bytes do not depend on the
// sizes of the reads.
type genReader struct {
	state uint64
	left  int64
	word  [8]byte
	have  int // unread bytes at the end of word
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.left {
		p = p[:g.left]
	}
	n := copy(p, g.word[8-g.have:])
	g.have -= n
	for len(p)-n >= 8 {
		binary.LittleEndian.PutUint64(p[n:], g.next())
		n += 8
	}
	if n < len(p) {
		binary.LittleEndian.PutUint64(g.word[:], g.next())
		k := copy(p[n:], g.word[:])
		g.have = 8 - k
		n += k
	}
	g.left -= int64(n)
	return n, nil
}

func (g *genReader) next() uint64 {
	g.state ^= g.state << 13
	g.state ^= g.state >> 7
	g.state ^= g.state << 17
	return g.state
}

// put stores data under id and checks the Info it returns.
func put(t *testing.T, s blob.Store, id string, data []byte, expires time.Time) blob.Info {
	t.Helper()
	info, err := s.Put(t.Context(), id, bytes.NewReader(data), expires)
	if err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", id, len(data), err)
	}
	checkInfo(t, info, id, data)
	return info
}

func checkInfo(t *testing.T, info blob.Info, id string, data []byte) {
	t.Helper()
	if info.ID != id || info.Size != int64(len(data)) || info.SHA256 != sha256.Sum256(data) {
		t.Fatalf("Put(%q) returned Info{ID: %q, Size: %d, SHA256: %x}; want ID %q, size %d, SHA-256 %x",
			id, info.ID, info.Size, info.SHA256, id, len(data), sha256.Sum256(data))
	}
}

// read opens id at offset and reads it to its end.
func read(t *testing.T, s blob.Store, id string, offset int64) ([]byte, error) {
	t.Helper()
	rc, err := s.Open(t.Context(), id, offset)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(rc)
	if cerr := rc.Close(); err == nil && cerr != nil {
		t.Fatalf("Close of the reader of %q: %v", id, cerr)
	}
	return b, err
}

// readAll is read without t, for other goroutines.
func readAll(ctx context.Context, s blob.Store, id string, offset int64) ([]byte, error) {
	rc, err := s.Open(ctx, id, offset)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	return b, err
}

// mustRead reads id from offset and compares it with want.
func mustRead(t *testing.T, s blob.Store, id string, offset int64, want []byte) {
	t.Helper()
	got, err := read(t, s, id, offset)
	if err != nil {
		t.Fatalf("reading %q from offset %d: %v", id, offset, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("reading %q from offset %d: got %d bytes (SHA-256 %x); want %d bytes (SHA-256 %x)",
			id, offset, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
}

// mustBeAbsent checks that Open of id fails with blob.ErrNotFound.
func mustBeAbsent(t *testing.T, s blob.Store, id string) {
	t.Helper()
	rc, err := s.Open(t.Context(), id, 0)
	if err == nil {
		b, rerr := io.ReadAll(rc)
		_ = rc.Close()
		t.Fatalf("Open(%q) succeeded (%d bytes readable, read error %v); want an error wrapping blob.ErrNotFound", id, len(b), rerr)
	}
	if !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Open(%q): %v; want an error wrapping blob.ErrNotFound", id, err)
	}
}

// expired collects what s.Expired(before) yields.
func expired(t *testing.T, s blob.Store, before time.Time) []string {
	t.Helper()
	var ids []string
	for id, err := range s.Expired(t.Context(), before) {
		if err != nil {
			t.Fatalf("Expired(%v): %v", before, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// failingReader yields data, then fails with err instead of io.EOF.
type failingReader struct {
	r   io.Reader
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

// cancellingReader yields data and calls cancel once after bytes have been
// read; it goes on yielding afterwards, so that only the store's own check
// of its ctx can stop the Put.
type cancellingReader struct {
	r      io.Reader
	after  int64
	read   int64
	cancel context.CancelFunc
}

func (c *cancellingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += int64(n)
	if c.read >= c.after && c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	return n, err
}

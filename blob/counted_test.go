package blob_test

import (
	"bytes"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/blob/blobtest"
)

type byteCounter struct{ stored, read atomic.Int64 }

func (c *byteCounter) Stored(n int64) { c.stored.Add(n) }
func (c *byteCounter) Read(n int64)   { c.read.Add(n) }

// Two Counted wrappers of one store count apart; a failed Put counts
// nothing; reads count the bytes read, from wherever they started.
func TestCounted(t *testing.T) {
	ctx := t.Context()
	base := blob.Memory()
	var a, b byteCounter
	sa, sb := blob.Counted(base, &a), blob.Counted(base, &b)

	if _, err := sa.Put(ctx, "x", bytes.NewReader(make([]byte, 3000)), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Put(ctx, "y", nil, time.Time{}); err == nil {
		t.Fatal("Put of a nil reader succeeded")
	}
	rc, err := sb.Open(ctx, "x", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, rc); err != nil {
		t.Fatal(err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	if got := [4]int64{a.stored.Load(), a.read.Load(), b.stored.Load(), b.read.Load()}; got != [4]int64{3000, 0, 0, 2000} {
		t.Fatalf("counted (a stored, a read, b stored, b read) = %v; want [3000 0 0 2000]", got)
	}
	if err := sb.Delete(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := base.Open(ctx, "x", 0); err == nil {
		t.Fatal("Delete through Counted did not reach the store")
	}
}

// Counted is a Store like any other.
func TestCountedConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite of Memory, through Counted")
	}
	blobtest.Run(t, func(*testing.T) blob.Store { return blob.Counted(blob.Memory(), &byteCounter{}) },
		blobtest.InMemory(), blobtest.LargeSize(4<<20))
}

package gocloud_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
	"testing/iotest"
	"time"

	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/blob/blobtest"
	"github.com/acemq/acemq/blob/gocloud"
	"go.uber.org/goleak"
	gcblob "gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openFile(t *testing.T) *gcblob.Bucket {
	t.Helper()
	b, err := fileblob.OpenBucket(t.TempDir(), &fileblob.Options{Metadata: fileblob.MetadataInSidecar})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func openMem(t *testing.T) *gcblob.Bucket {
	t.Helper()
	b := memblob.OpenBucket(nil)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	t.Run("fileblob", func(t *testing.T) {
		blobtest.Run(t, func(t *testing.T) blob.Store { return gocloud.Bucket(openFile(t)) }, blobtest.ReadsMayFailDuringReplace())
	})
	t.Run("memblob", func(t *testing.T) {
		blobtest.Run(t, func(t *testing.T) blob.Store { return gocloud.Bucket(openMem(t)) }, blobtest.InMemory())
	})
	t.Run("fileblob-prefix", func(t *testing.T) {
		blobtest.Run(t, func(t *testing.T) blob.Store { return gocloud.Bucket(openFile(t), gocloud.Prefix("acemq/")) },
			blobtest.LargeSize(4<<20), blobtest.ReadsMayFailDuringReplace())
	})
}

// Objects the store did not write, and those outside its prefix, are
// never listed as expired, so Sweep leaves them; and the bucket stays the
// caller's: usable after the store is done with it.
func TestForeignObjectsAndBucketUntouched(t *testing.T) {
	ctx := t.Context()
	b := openFile(t)
	for _, k := range []string{"acemq/foreign", "other/old"} {
		if err := b.WriteAll(ctx, k, []byte("not ours"), nil); err != nil {
			t.Fatal(err)
		}
	}
	s := gocloud.Bucket(b, gocloud.Prefix("acemq/"))
	if _, err := s.Put(ctx, "mine", bytes.NewReader([]byte("ours")), time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	attrs, err := b.Attributes(ctx, "acemq/mine")
	if err != nil {
		t.Fatalf("the object is not under the prefix: %v", err)
	}
	if _, err := time.Parse(time.RFC3339Nano, attrs.Metadata[gocloud.MetadataExpires]); err != nil {
		t.Fatalf("metadata %s = %q: %v", gocloud.MetadataExpires, attrs.Metadata[gocloud.MetadataExpires], err)
	}
	n, err := blob.Sweep(ctx, s, time.Now())
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 deleted", n, err)
	}
	var left []string
	it := b.List(nil)
	for {
		o, err := it.Next(ctx)
		if err != nil {
			break
		}
		left = append(left, o.Key)
	}
	if want := []string{"acemq/foreign", "other/old"}; !slices.Equal(left, want) {
		t.Fatalf("the bucket holds %q after Sweep; want %q", left, want)
	}
	if ok, err := b.IsAccessible(ctx); !ok || err != nil {
		t.Fatalf("the bucket is not accessible after the store used it: %v, %v", ok, err)
	}
}

// A Put that fails mid-way (its reader breaks, or its ctx is cancelled)
// leaves nothing in the bucket's directory: no object and no temporary
// file of fileblob's.
func TestNoPartialFileLeft(t *testing.T) {
	dir := t.TempDir()
	b, err := fileblob.OpenBucket(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	s := gocloud.Bucket(b)
	boom := errors.New("broken")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for name, r := range map[string]io.Reader{
		"failing":   io.MultiReader(bytes.NewReader(make([]byte, 3*blob.ChunkSize/2)), iotest.ErrReader(boom)),
		"cancelled": io.MultiReader(bytes.NewReader(make([]byte, 3*blob.ChunkSize/2)), cancelOnRead{cancel}, bytes.NewReader(make([]byte, blob.ChunkSize))),
	} {
		pctx := t.Context()
		if name == "cancelled" {
			pctx = ctx
		}
		if _, err := s.Put(pctx, name, r, time.Time{}); err == nil {
			t.Fatalf("%s: Put succeeded", name)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("the bucket directory holds %d entries after failed Puts (%s ...)", len(entries), entries[0].Name())
	}
}

// cancelOnRead cancels when read and yields nothing.
type cancelOnRead struct{ cancel context.CancelFunc }

func (c cancelOnRead) Read([]byte) (int, error) { c.cancel(); return 0, io.EOF }

func TestNilBucket(t *testing.T) {
	s := gocloud.Bucket(nil)
	if _, err := s.Put(t.Context(), "x", bytes.NewReader(nil), time.Time{}); err == nil {
		t.Fatal("Put on a nil bucket succeeded")
	}
	for _, err := range s.Expired(t.Context(), time.Now()) {
		if err == nil {
			t.Fatal("Expired on a nil bucket yielded an ID")
		}
	}
}

package blobtest

import (
	"crypto/sha256"
	"io"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq/blob"
)

// heapBudget is how far above its starting point the heap may rise while
// the large object streams: a few chunks of buffers and the garbage
// between two collections, far under the object's size.
const heapBudget = 24 << 20

func (s suite) large(t *testing.T) {
	st := s.newStore(t)
	size := s.cfg.largeSize
	id := newID(t, "large")

	h := sha256.New()
	src := io.TeeReader(&genReader{state: 0x9e3779b97f4a7c15, left: size}, h)
	var info blob.Info
	peak := heapDuring(t, func() {
		var err error
		info, err = st.Put(t.Context(), id, src, time.Time{})
		if err != nil {
			t.Fatalf("Put of %d MiB: %v", size>>20, err)
		}
	})
	var want [32]byte
	h.Sum(want[:0])
	if info.Size != size || info.SHA256 != want {
		t.Fatalf("Put of %d bytes returned size %d, SHA-256 %x; want %x", size, info.Size, info.SHA256, want)
	}
	t.Logf("Put of %d MiB: heap rose by at most %.1f MiB", size>>20, float64(peak)/(1<<20))
	if !s.cfg.inMemory && peak > heapBudget {
		t.Errorf("Put of %d MiB: the heap rose by %.1f MiB; want at most %d MiB", size>>20, float64(peak)/(1<<20), heapBudget>>20)
	}

	var got [32]byte
	var n int64
	peak = heapDuring(t, func() {
		rc, err := st.Open(t.Context(), id, 0)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer func() { _ = rc.Close() }()
		h := sha256.New()
		if n, err = io.Copy(h, rc); err != nil {
			t.Fatalf("reading %d MiB: %v", size>>20, err)
		}
		h.Sum(got[:0])
	})
	if n != size || got != want {
		t.Fatalf("read %d bytes with SHA-256 %x; want %d bytes, %x", n, got, size, want)
	}
	t.Logf("reading %d MiB: heap rose by at most %.1f MiB", size>>20, float64(peak)/(1<<20))
	if peak > heapBudget {
		t.Errorf("reading %d MiB: the heap rose by %.1f MiB; want at most %d MiB", size>>20, float64(peak)/(1<<20), heapBudget>>20)
	}

	// The tail, from an offset near the end.
	tail := payloadTail(size, 4096)
	mustRead(t, st, id, size-4096, tail)
}

// payloadTail returns the last n bytes of the large object's generator.
func payloadTail(size, n int64) []byte {
	g := &genReader{state: 0x9e3779b97f4a7c15, left: size}
	if _, err := io.CopyN(io.Discard, g, size-n); err != nil {
		panic(err)
	}
	b, _ := io.ReadAll(g)
	return b
}

// heapDuring runs fn while sampling the heap's live and unswept objects
// every millisecond, and returns the highest sample above the heap after
// a collection before fn.
func heapDuring(t *testing.T, fn func()) uint64 {
	t.Helper()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	runtime.GC()
	base := read()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if v := read(); v > peak {
				peak = v
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	func() {
		defer func() { close(stop); wg.Wait() }()
		fn()
	}()
	if v := read(); v > peak {
		peak = v
	}
	if peak < base {
		return 0
	}
	return peak - base
}

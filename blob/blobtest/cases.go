package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq/blob"
)

func (s suite) roundTrip(t *testing.T) {
	st := s.newStore(t)
	for i, n := range []int64{0, 1, 1000, chunk - 1, chunk, chunk + 1, 3*chunk + 17} {
		id := newID(t, fmt.Sprintf("rt%d", n))
		data := payload(uint64(i+1), n)
		put(t, st, id, data, time.Time{})
		mustRead(t, st, id, 0, data)
	}
}

func (s suite) openAtOffset(t *testing.T) {
	st := s.newStore(t)
	id := newID(t, "offset")
	size := int64(2*chunk + chunk/2)
	data := payload(7, size)
	put(t, st, id, data, time.Time{})
	for _, off := range []int64{0, 1, chunk / 3, chunk - 1, chunk, chunk + 1, 2 * chunk, size / 2, size - 1, size, size + 1, size + 10*chunk} {
		want := data[min(off, size):]
		mustRead(t, st, id, off, want)
	}
}

func (s suite) badArguments(t *testing.T) {
	st := s.newStore(t)
	ctx := t.Context()
	if _, err := st.Put(ctx, "", bytes.NewReader([]byte("x")), time.Time{}); err == nil {
		t.Fatal("Put with an empty ID succeeded; want an error")
	}
	id := newID(t, "nilreader")
	if _, err := st.Put(ctx, id, nil, time.Time{}); err == nil {
		t.Fatal("Put with a nil reader succeeded; want an error")
	}
	mustBeAbsent(t, st, id)
	put(t, st, id, []byte("abc"), time.Time{})
	rc, err := st.Open(ctx, id, -1)
	if err == nil {
		_ = rc.Close()
		t.Fatal("Open at offset -1 succeeded; want an error")
	}
	if errors.Is(err, io.EOF) {
		t.Fatalf("Open at offset -1: %v; want an error that is not io.EOF", err)
	}
	if _, err := st.Open(ctx, "", 0); err == nil {
		t.Fatal("Open with an empty ID succeeded; want an error")
	}
}

func (s suite) notFoundAndDelete(t *testing.T) {
	st := s.newStore(t)
	ctx := t.Context()
	id := newID(t, "delete")
	mustBeAbsent(t, st, id)
	if err := st.Delete(ctx, id); err != nil {
		t.Fatalf("Delete of an absent object: %v; want nil", err)
	}
	data := payload(3, chunk+5)
	put(t, st, id, data, time.Now().Add(time.Hour))
	other := newID(t, "kept")
	put(t, st, other, []byte("kept"), time.Time{})
	for i := range 2 {
		if err := st.Delete(ctx, id); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
		mustBeAbsent(t, st, id)
	}
	if got := expired(t, st, time.Now().Add(24*time.Hour)); len(got) != 0 {
		t.Fatalf("Expired lists %q after Delete; want nothing", got)
	}
	mustRead(t, st, other, 0, []byte("kept"))
}

func (s suite) replace(t *testing.T) {
	st := s.newStore(t)
	id := newID(t, "replace")
	put(t, st, id, payload(1, 2*chunk), time.Now().Add(-time.Minute))
	b := payload(2, chunk/2)
	put(t, st, id, b, time.Now().Add(time.Hour))
	mustRead(t, st, id, 0, b)
	if got := expired(t, st, time.Now()); len(got) != 0 {
		t.Fatalf("Expired lists %q; the second Put's expiry is an hour away", got)
	}
}

func (s suite) failingReader(t *testing.T) {
	st := s.newStore(t)
	boom := errors.New("blobtest: the reader broke")
	fresh := newID(t, "failfresh")
	kept := newID(t, "failkept")
	old := payload(9, chunk+3)
	put(t, st, kept, old, time.Time{})
	for _, id := range []string{fresh, kept} {
		r := &failingReader{r: bytes.NewReader(payload(10, chunk+chunk/2)), err: boom}
		_, err := st.Put(t.Context(), id, r, time.Now().Add(-time.Hour))
		if !errors.Is(err, boom) {
			t.Fatalf("Put(%q) with a reader failing after 1.5 chunks: %v; want an error wrapping the reader's", id, err)
		}
	}
	mustBeAbsent(t, st, fresh)
	mustRead(t, st, kept, 0, old)
	if got := expired(t, st, time.Now().Add(24*time.Hour)); len(got) != 0 {
		t.Fatalf("Expired lists %q after failed Puts; want nothing", got)
	}
}

func (s suite) cancelledMidPut(t *testing.T) {
	st := s.newStore(t)
	fresh := newID(t, "cancelfresh")
	kept := newID(t, "cancelkept")
	old := payload(11, 100)
	put(t, st, kept, old, time.Time{})
	for _, id := range []string{fresh, kept} {
		ctx, cancel := context.WithCancel(t.Context())
		r := &cancellingReader{r: bytes.NewReader(payload(12, 4*chunk)), after: chunk + chunk/2, cancel: cancel}
		_, err := st.Put(ctx, id, r, time.Time{})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Put(%q) whose ctx was cancelled after 1.5 of 4 chunks: %v; want an error wrapping context.Canceled", id, err)
		}
	}
	mustBeAbsent(t, st, fresh)
	mustRead(t, st, kept, 0, old)
}

func (s suite) cancelledContext(t *testing.T) {
	st := s.newStore(t)
	id := newID(t, "cancelled")
	put(t, st, id, []byte("there"), time.Now().Add(-time.Hour))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	other := newID(t, "never")
	if _, err := st.Put(ctx, other, bytes.NewReader([]byte("x")), time.Time{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled ctx: %v; want context.Canceled", err)
	}
	mustBeAbsent(t, st, other)
	if rc, err := st.Open(ctx, id, 0); !errors.Is(err, context.Canceled) {
		if err == nil {
			_ = rc.Close()
		}
		t.Fatalf("Open with a cancelled ctx: %v; want context.Canceled", err)
	}
	if err := st.Delete(ctx, id); !errors.Is(err, context.Canceled) {
		t.Fatalf("Delete with a cancelled ctx: %v; want context.Canceled", err)
	}
	var got error
	for _, err := range st.Expired(ctx, time.Now()) {
		if err != nil {
			got = err
			break
		}
	}
	if !errors.Is(got, context.Canceled) {
		t.Fatalf("Expired with a cancelled ctx yielded error %v; want context.Canceled", got)
	}
}

func (s suite) cancelledMidRead(t *testing.T) {
	st := s.newStore(t)
	id := newID(t, "midread")
	data := payload(13, 3*chunk)
	put(t, st, id, data, time.Time{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rc, err := st.Open(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	first := make([]byte, 1000)
	if _, err := io.ReadFull(rc, first); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, data[:1000]) {
		t.Fatal("the first 1000 bytes read differ from those put")
	}
	cancel()
	if n, err := rc.Read(make([]byte, 1000)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read after the ctx was cancelled: %d bytes, error %v; want context.Canceled", n, err)
	}
}

func (s suite) expiry(t *testing.T) {
	st := s.newStore(t)
	now := time.Now()
	past, soon, never := newID(t, "past"), newID(t, "soon"), newID(t, "never")
	put(t, st, past, []byte("past"), now.Add(-time.Second))
	put(t, st, soon, []byte("soon"), now.Add(time.Hour))
	put(t, st, never, []byte("never"), time.Time{})

	mustBeAbsent(t, st, past)
	mustRead(t, st, soon, 0, []byte("soon"))
	mustRead(t, st, never, 0, []byte("never"))

	check := func(before time.Time, want ...string) {
		t.Helper()
		got := expired(t, st, before)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("Expired(now%+v) = %q; want %q", before.Sub(now).Round(time.Second), got, want)
		}
	}
	check(now.Add(-time.Hour))
	check(now, past)
	check(now.Add(2*time.Hour), past, soon)
	check(now.Add(100*365*24*time.Hour), past, soon)

	for range 2 {
		if err := st.Delete(t.Context(), past); err != nil {
			t.Fatalf("Delete of an expired object: %v", err)
		}
	}
	check(now.Add(2*time.Hour), soon)
	mustRead(t, st, soon, 0, []byte("soon"))
}

func (s suite) expiredIteration(t *testing.T) {
	st := s.newStore(t)
	const n = 25
	before := time.Now()
	var want []string
	for i := range n {
		id := newID(t, fmt.Sprintf("it%02d", i))
		put(t, st, id, []byte(id), before.Add(-time.Duration(i+1)*time.Second))
		want = append(want, id)
	}
	// Stopping early is allowed and yields no more.
	count := 0
	for _, err := range st.Expired(t.Context(), before) {
		if err != nil {
			t.Fatal(err)
		}
		count++
		if count == 3 {
			break
		}
	}
	// Deleting while iterating, as Sweep does, is allowed.
	var got []string
	for id, err := range st.Expired(t.Context(), before) {
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Delete(t.Context(), id); err != nil {
			t.Fatalf("Delete(%q) while iterating Expired: %v", id, err)
		}
		got = append(got, id)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Expired yielded %d IDs %q; want the %d put", len(got), got, n)
	}
	if left := expired(t, st, before); len(left) != 0 {
		t.Fatalf("Expired lists %q after every one was deleted", left)
	}
}

func (s suite) concurrentDifferent(t *testing.T) {
	st := s.newStore(t)
	const n = 8
	ids := make([]string, n)
	datas := make([][]byte, n)
	for i := range n {
		ids[i] = newID(t, fmt.Sprintf("cd%d", i))
		datas[i] = payload(uint64(100+i), chunk+int64(i)*chunk/4)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = st.Put(t.Context(), ids[i], bytes.NewReader(datas[i]), time.Time{})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("concurrent Put(%q): %v", ids[i], errs[i])
		}
		mustRead(t, st, ids[i], 0, datas[i])
	}
}

func (s suite) concurrentSame(t *testing.T) {
	st := s.newStore(t)
	const n = 6
	id := newID(t, "same")
	datas := make([][]byte, n)
	sums := make(map[[32]byte]int)
	for i := range n {
		datas[i] = payload(uint64(200+i), chunk+int64(i)*1000)
		sums[sha256.Sum256(datas[i])] = i
	}
	put(t, st, id, datas[0], time.Time{})
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readErr := make(chan error, 2)
	for range 2 {
		readers.Go(func() {
			// At most 20 reads each: enough to overlap the Puts without
			// spinning the CPU that the parallel subtests share.
			for range 20 {
				select {
				case <-stop:
					return
				default:
				}
				b, err := readAll(t.Context(), st, id, 0)
				if err != nil {
					if !s.cfg.racyReplace && !errors.Is(err, blob.ErrNotFound) {
						readErr <- fmt.Errorf("a read racing with Puts of the same ID: %w", err)
						return
					}
					continue
				}
				if _, ok := sums[sha256.Sum256(b)]; !ok {
					readErr <- fmt.Errorf("a read racing with Puts of the same ID got %d bytes that no Put wrote", len(b))
					return
				}
			}
		})
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = st.Put(t.Context(), id, bytes.NewReader(datas[i]), time.Time{})
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(readErr)
	for err := range readErr {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Put #%d of %q: %v", i, id, err)
		}
	}
	b, err := read(t, st, id, 0)
	if err != nil {
		t.Fatalf("reading %q after the concurrent Puts: %v", id, err)
	}
	if _, ok := sums[sha256.Sum256(b)]; !ok {
		t.Fatalf("after concurrent Puts of %q it holds %d bytes that no Put wrote", id, len(b))
	}
}

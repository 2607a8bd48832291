package transporttest

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq/transport"
)

// The subtests in this file check transport.Fencer: the counter grows
// across calls, clients, concurrent callers and clients closed in the
// middle of a call.

// fencer returns tr as a transport.Fencer, or skips the test.
func fencer(e *env, tr transport.Transport) transport.Fencer {
	e.t.Helper()
	f, ok := tr.(transport.Fencer)
	if !ok {
		e.t.Skipf("%T is not a transport.Fencer", tr)
	}
	return f
}

// counter names a fencing counter unique to the subtest, deleted when it
// ends (a transport may keep it as a queue of that name).
func (e *env) counter(base string) string {
	name := e.name(base)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e.f.Timeout)
		defer cancel()
		if err := e.admin.DeleteQueue(ctx, name); err != nil {
			e.t.Errorf("DeleteQueue(%q) of a fencing counter: %v", name, err)
		}
	})
	return name
}

// fence calls Fence, failing the test on error or a zero value.
func (e *env) fence(f transport.Fencer, name string) uint64 {
	e.t.Helper()
	v, err := f.Fence(e.ctx(), name)
	if err != nil {
		e.t.Fatalf("Fence(%q): %v", name, err)
	}
	if v == 0 {
		e.t.Fatalf("Fence(%q) = 0 without an error; want at least 1", name)
	}
	return v
}

func testFenceSequential(e *env) {
	a, b := fencer(e, e.client()), fencer(e, e.client())
	name, other := e.counter("fence"), e.counter("other")
	var got []uint64
	for i := range 6 {
		f := a
		if i%2 == 1 {
			f = b
		}
		got = append(got, e.fence(f, name))
	}
	if !strictlyIncreasing(got) {
		e.t.Errorf("Fence on two clients in turn returned %v; want each value above the one before", got)
	}
	// Another name is another counter: it starts low whatever name is at.
	if v := e.fence(a, other); v > got[0] {
		e.t.Errorf("a fresh counter's first Fence = %d, above the first value of another (%d); counters must be separate", v, got[0])
	}

	// A client opened after the others closed goes on above them.
	for _, tr := range []transport.Transport{a.(transport.Transport), b.(transport.Transport)} {
		if err := tr.Close(); err != nil {
			e.t.Fatalf("Close: %v", err)
		}
	}
	if v := e.fence(fencer(e, e.client()), name); v <= got[len(got)-1] {
		e.t.Errorf("Fence on a new client after the others closed = %d; want above %d", v, got[len(got)-1])
	}
}

// fenceCall is one Fence call placed in the order of all calls by a shared
// sequence: start is taken before the call, end after it returned.
type fenceCall struct {
	start, end int64
	value      uint64
}

func testFenceConcurrent(e *env) {
	const clients, callers, calls = 3, 3, 8
	name := e.counter("fence")
	var (
		seq   atomic.Int64
		mu    sync.Mutex
		done  []fenceCall
		wg    sync.WaitGroup
		fails atomic.Int64
	)
	for range clients {
		f := fencer(e, e.client())
		for range callers {
			wg.Go(func() {
				var mine []uint64
				for range calls {
					start := seq.Add(1)
					v, err := f.Fence(e.ctx(), name)
					end := seq.Add(1)
					if err != nil || v == 0 {
						e.t.Errorf("Fence(%q) = %d, %v", name, v, err)
						fails.Add(1)
						return
					}
					mine = append(mine, v)
					mu.Lock()
					done = append(done, fenceCall{start: start, end: end, value: v})
					mu.Unlock()
				}
				if !strictlyIncreasing(mine) {
					e.t.Errorf("one caller's Fences returned %v; want each above the one before", mine)
				}
			})
		}
	}
	wg.Wait()
	if fails.Load() > 0 {
		return
	}
	values := make([]uint64, len(done))
	for i, c := range done {
		values[i] = c.value
	}
	slices.Sort(values)
	if len(slices.Compact(values)) != len(done) {
		e.t.Errorf("%d concurrent Fences returned only %d distinct values", len(done), len(slices.Compact(values)))
	}
	checkFenceOrder(e, done)
}

// checkFenceOrder fails the test when a call that began after another
// returned got a value not above that one's.
func checkFenceOrder(e *env, calls []fenceCall) {
	e.t.Helper()
	byEnd := slices.SortedFunc(slices.Values(calls), func(a, b fenceCall) int { return cmp.Compare(a.end, b.end) })
	// highest[i] is the call with the highest value among byEnd[:i+1].
	highest := make([]fenceCall, len(byEnd))
	for i, c := range byEnd {
		highest[i] = c
		if i > 0 && highest[i-1].value > c.value {
			highest[i] = highest[i-1]
		}
	}
	bad := 0
	for _, b := range calls {
		n, _ := slices.BinarySearchFunc(byEnd, b.start, func(c fenceCall, start int64) int { return cmp.Compare(c.end, start) })
		if n == 0 {
			continue // no call had returned when b began
		}
		if a := highest[n-1]; b.value <= a.value {
			if bad < 5 {
				e.t.Errorf("a Fence that began after another returned %d got %d; want above it", a.value, b.value)
			}
			bad++
		}
	}
	if bad > 5 {
		e.t.Errorf("... %d such calls in all", bad)
	}
}

func testFenceClientDies(e *env) {
	// Clients are closed while their Fences run, at a random moment, so
	// that a close lands on every step of the call in some round. What a
	// cut-short call returned, if anything, must still be below every value
	// handed out after it.
	const rounds = 12
	name := e.counter("fence")
	var calls []fenceCall
	var seq atomic.Int64
	var mu sync.Mutex
	for round := range rounds {
		tr := e.client()
		f := fencer(e, tr)
		e.fence(f, name) // the counter exists and the client is warm
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 2 {
			wg.Go(func() {
				for range 200 { // an in-process broker answers at once
					select {
					case <-stop:
						return
					default:
					}
					start := seq.Add(1)
					v, err := f.Fence(e.ctx(), name)
					end := seq.Add(1)
					if err != nil {
						if !errors.Is(err, transport.ErrClosed) && e.ctx().Err() == nil {
							// A call cut short by the close may fail with
							// whatever the broker's side said; it must not
							// return a value.
							if v != 0 {
								e.t.Errorf("a failed Fence returned %d with %v; want 0", v, err)
							}
						}
						return
					}
					mu.Lock()
					calls = append(calls, fenceCall{start: start, end: end, value: v})
					mu.Unlock()
				}
			})
		}
		time.Sleep(time.Duration(rand.N(2000+round*500)) * time.Microsecond)
		if err := tr.Close(); err != nil {
			e.t.Fatalf("Close: %v", err)
		}
		close(stop)
		wg.Wait()
	}
	after := fencer(e, e.client())
	for range 3 {
		start := seq.Add(1)
		v := e.fence(after, name)
		calls = append(calls, fenceCall{start: start, end: seq.Add(1), value: v})
	}
	checkFenceOrder(e, calls)
}

func testFenceConflict(e *env) {
	f := fencer(e, e.client())
	q := e.queue("plain", nil)
	if _, err := f.Fence(e.ctx(), q); !errors.Is(err, transport.ErrTopologyConflict) {
		e.t.Errorf("Fence on the name of plain queue %q = %v; want ErrTopologyConflict", q, err)
	}
	e.inspect(q) // still there
	if _, err := f.Fence(e.ctx(), ""); err == nil {
		e.t.Error("Fence with an empty name succeeded; want an error")
	}
	// The client is still usable.
	e.fence(f, e.counter("after"))
}

// strictlyIncreasing reports whether each value is above the one before.
func strictlyIncreasing(vs []uint64) bool {
	for i := 1; i < len(vs); i++ {
		if vs[i] <= vs[i-1] {
			return false
		}
	}
	return true
}

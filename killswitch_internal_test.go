package acemq

import (
	"math"
	"testing"
	"time"
)

func TestWindowSlides(t *testing.T) {
	t.Parallel()
	w := newWindow(10 * time.Second) // slices of 1s
	at := func(d time.Duration) int64 { return int64(100*time.Second + d) }
	type step struct {
		at             time.Duration
		failed         bool
		failures, tots int
	}
	for i, s := range []step{
		{0, true, 1, 1},
		{500 * time.Millisecond, false, 1, 2},
		{3 * time.Second, true, 2, 3},
		{9900 * time.Millisecond, true, 3, 4},           // the first slice is still in
		{10 * time.Second, false, 2, 3},                 // it has slid out
		{13 * time.Second, true, 2, 3},                  // so has the one at 3s
		{13*time.Second + time.Millisecond, true, 3, 4}, // same slice
		{40 * time.Second, false, 0, 1},                 // everything forgotten
	} {
		f, n := w.add(at(s.at), s.failed)
		if f != s.failures || n != s.tots {
			t.Errorf("step %d at %v: %d failures of %d, want %d of %d", i, s.at, f, n, s.failures, s.tots)
		}
	}
	w.reset()
	if f, n := w.add(at(40*time.Second), true); f != 1 || n != 1 {
		t.Errorf("after reset: %d failures of %d, want 1 of 1", f, n)
	}
}

func TestKillSwitchPolicyTrips(t *testing.T) {
	t.Parallel()
	p, err := KillSwitchPolicy{}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if p.Window != 30*time.Second || p.MinFailures != 10 || p.Threshold != 0.5 || p.CoolDown != 30*time.Second {
		t.Fatalf("defaults: %+v", p)
	}
	for _, tc := range []struct {
		name            string
		failures, total int
		want            bool
	}{
		{"below MinFailures", 9, 9, false},
		{"at MinFailures, every delivery failed", 10, 10, true},
		{"exactly the threshold", 10, 20, true},
		{"under the threshold", 10, 21, false},
		{"many failures, a small share", 100, 1000, false},
	} {
		if got := p.trips(tc.failures, tc.total); got != tc.want {
			t.Errorf("%s: trips(%d, %d) = %v, want %v", tc.name, tc.failures, tc.total, got, tc.want)
		}
	}
}

func TestTimesSatSaturates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		d    time.Duration
		n    int64
		want time.Duration
	}{
		{"small", 30 * time.Second, 8, 4 * time.Minute},
		{"at the edge", math.MaxInt64 / 8, 8, math.MaxInt64 / 8 * 8},
		{"past it", math.MaxInt64/8 + 1, 8, math.MaxInt64},
		{"the longest", math.MaxInt64, 2, math.MaxInt64},
	} {
		if got := timesSat(tc.d, tc.n); got != tc.want {
			t.Errorf("%s: timesSat(%v, %d) = %v, want %v", tc.name, tc.d, tc.n, got, tc.want)
		}
	}
}

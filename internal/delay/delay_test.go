package delay

import (
	"testing"
	"time"
)

func TestHopTakesTheHighestBit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		wait time.Duration
		want string
		hops int
	}{
		{name: "a nanosecond waits one unit", wait: time.Nanosecond, want: "acemq.delay.level.00", hops: 1},
		{name: "one unit", wait: Unit, want: "acemq.delay.level.00", hops: 1},
		{name: "just over one unit", wait: Unit + 1, want: "acemq.delay.level.01", hops: 1},
		{name: "an hour", wait: time.Hour, want: "acemq.delay.level.14", hops: 4},
		{name: "MaxDelay", wait: (1<<28 - 1) * time.Second, want: "acemq.delay.level.30", hops: 28},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Hop(tc.wait); got != tc.want {
				t.Errorf("Hop(%s) = %s, want %s", tc.wait, got, tc.want)
			}
			if got := Hops(tc.wait); got != tc.hops {
				t.Errorf("Hops(%s) = %d, want %d", tc.wait, got, tc.hops)
			}
		})
	}
}

func TestDueNeverReadsEarlier(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 1, 2, 3, 400_000_001, time.UTC)
	got, err := ParseDue(FormatDue(at))
	if err != nil {
		t.Fatal(err)
	}
	if got.Before(at) || got.Sub(at) >= time.Millisecond {
		t.Errorf("FormatDue(%s) reads back as %s", at, got)
	}
	exact := at.Truncate(time.Millisecond)
	if got, _ := ParseDue(FormatDue(exact)); !got.Equal(exact) {
		t.Errorf("a whole millisecond %s reads back as %s", exact, got)
	}
}

func TestToRoundTrips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ exchange, key string }{{"", "orders"}, {"ex:1", "a:b.c"}, {"x", ""}} {
		e, k, err := DecodeTo(EncodeTo(tc.exchange, tc.key))
		if err != nil || e != tc.exchange || k != tc.key {
			t.Errorf("EncodeTo(%q, %q) reads back as %q, %q, %v", tc.exchange, tc.key, e, k, err)
		}
	}
	for _, bad := range []any{"", "x", "9:ab", "-1:a", 7} {
		if _, _, err := DecodeTo(bad); err == nil {
			t.Errorf("DecodeTo(%#v) took it", bad)
		}
	}
}

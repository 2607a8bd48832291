package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRun runs the program and checks what it tells, per order in order.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for id, want := range map[string][]string{
		"o-1": {
			"o-1: placed, 4200 cents; payment due within 600ms",
			"o-1: paid; asking the warehouse to ship",
			"o-1: payment timeout, but the order is paid: nothing to do",
			"o-1: shipped; the saga is over",
			"o-1: shipped, version 4, done true",
		},
		"o-2": {
			"o-2: placed, 1999 cents; payment due within 600ms",
			"o-2: payment timeout; cancelled",
			"o-2: a late payment was acked without a step: the saga is over",
			"o-2: cancelled, version 2, done true",
		},
	} {
		var got []string
		for _, l := range lines {
			if strings.HasPrefix(l, id+":") {
				got = append(got, l)
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\n%s\nwant:\n%s", id, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if !strings.Contains(out.String(), "notification to the customer: order o-2 cancelled (no payment within 600ms)") {
		t.Errorf("no cancellation notice:\n%s", out.String())
	}
}

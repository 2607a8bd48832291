package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
)

func TestStats(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			u := b.url(t)
			q := acemqtest.QueueName(t, "stats")
			deadLetters(t, u, q, "OrderPlaced", "OrderPlaced", "OrderCancelled")
			r := runCLI(t, "-url", u, "stats", q, "-delays", "250ms")
			if r.code != exitOK {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			tests := []struct {
				name string
				line string // a regular expression for one line of the table
			}{
				{"work queue", `(?m)^` + regexp.QuoteMeta(q) + `\s+work\s+0\s+0$`},
				{"dead letters", `(?m)^` + regexp.QuoteMeta(q+".dlq") + `\s+dead letters\s+3\s+0$`},
				{"parked", `(?m)^` + regexp.QuoteMeta(q+".parked") + `\s+parked\s+0\s+0$`},
				{"default tier", `(?m)^` + regexp.QuoteMeta(q+".retry.2m0s") + `\s+retry after 2m0s\s+0\s+0$`},
				{"tier not declared", `(?m)^` + regexp.QuoteMeta(q+".retry.250ms") + `\s+retry after 250ms\s+absent\s*$`},
			}
			for _, tt := range tests {
				if !regexp.MustCompile(tt.line).MatchString(r.stdout) {
					t.Errorf("%s: no line matches %s in:\n%s", tt.name, tt.line, r.stdout)
				}
			}
		})
	}
}

func TestStatsOfMissingQueue(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "-url", acemqtest.Memory(t), "stats", "ghost")
	if r.code != exitFailure || !strings.Contains(r.stderr, "acemq: stats: no queue named ghost") {
		t.Fatalf("a mistyped queue: exit status %d, want %d, and stderr naming it:\n%s", r.code, exitFailure, r.stderr)
	}
	if n := strings.Count(r.stdout, "absent"); n != 7 {
		t.Errorf("%d queues shown absent, want 7 (work, dlq, parked, 4 tiers):\n%s", n, r.stdout)
	}
	want := "no retry tiers of ghost found; looked for ghost.retry.1s, ghost.retry.5s, ghost.retry.30s, ghost.retry.2m0s. " +
		"A consumer with other retry delays has other tiers: name them with -delays"
	if !strings.Contains(r.stdout, want) {
		t.Errorf("the output does not say which tiers it looked for and how to name others:\n%s", r.stdout)
	}
	r = runCLI(t, "-url", acemqtest.Memory(t), "stats", "ghost", "-delays", "10s")
	if !strings.Contains(r.stdout, "ghost.retry.5s, ghost.retry.10s, ghost.retry.30s") {
		t.Errorf("the names looked for do not include the -delays tier:\n%s", r.stdout)
	}
}

func TestStatsSaysNothingWhenTiersAreFound(t *testing.T) {
	t.Parallel()
	u := acemqtest.Memory(t)
	q := acemqtest.QueueName(t, "found")
	deadLetters(t, u, q, "A")
	r := runCLI(t, "-url", u, "stats", q)
	if r.code != exitOK || strings.Contains(r.stdout, "no retry tiers") {
		t.Errorf("exit status %d; a note about missing tiers where there are some:\n%s", r.code, r.stdout)
	}
	want := "Retry tiers looked for: the default retry policy's tiers (1s, 5s, 30s, 2m0s); a consumer with other delays has other tiers: name them with -delays."
	if !strings.Contains(r.stdout, want) {
		t.Errorf("stats does not say which tiers it looked for:\n%s", r.stdout)
	}
	r = runCLI(t, "-url", u, "stats", q, "-delays", "200ms")
	if !strings.Contains(r.stdout, "and -delays' (200ms)") {
		t.Errorf("stats does not say it looked for the -delays tiers too:\n%s", r.stdout)
	}
}

// TestMemoryURLIsRefused: outside the tests, a memory:// broker is a new,
// empty one in the command's own process: the command says so and fails
// instead of reporting every queue absent.
func TestMemoryURLIsRefused(t *testing.T) {
	t.Parallel()
	var out, errOut strings.Builder
	c := &cli{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }, url: "memory://orders", timeout: time.Second}
	err := runStats(context.Background(), c, []string{"orders"})
	if err == nil || !strings.Contains(err.Error(), "in-process broker") {
		t.Fatalf("stats on memory:// returned %v, want an error saying it is in-process", err)
	}
	if code := c.report(err); code != exitFailure {
		t.Errorf("exit status %d, want %d", code, exitFailure)
	}
}

func TestPeek(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			u := b.url(t)
			q := acemqtest.QueueName(t, "peek")
			mq := deadLetters(t, u, q, "OrderPlaced", "OrderCancelled", "OrderPlaced")
			dlq := acemq.DeadLetterQueue(q)

			r := runCLI(t, "-url", u, "peek", dlq, "-n", "2", "-body", "40")
			if r.code != exitOK {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			tests := []struct {
				name, want string
			}{
				{"first message", "--- 1 of 2"},
				{"second message", "--- 2 of 2"},
				{"its ID", "OrderPlaced-a"},
				{"its type", "OrderCancelled (version 1)"},
				{"the reason", "the handler rejected it: customer 42 does not exist"},
				{"the attempt", "attempt      1"},
				{"a header", "x-region = eu"},
				{"its ordering key", "key          key-OrderPlaced"},
				{"the body, cut", `{"n":0,"pad":"` + strings.Repeat("x", 26) + `… (276 more bytes)`},
				{"the summary", "2 messages shown; put back on " + dlq},
			}
			for _, tt := range tests {
				if !strings.Contains(r.stdout, tt.want) {
					t.Errorf("%s: the output does not contain %q:\n%s", tt.name, tt.want, r.stdout)
				}
			}
			if strings.Contains(r.stdout, "OrderPlaced-c") {
				t.Errorf("peek -n 2 showed the third message:\n%s", r.stdout)
			}
			if n := readyAfter(t, mq, dlq, 3); n != 3 {
				t.Fatalf("%d messages on %s after the peek, want all 3", n, dlq)
			}
			// The order is kept: a second peek shows the same head.
			again := runCLI(t, "-url", u, "peek", dlq, "-n", "3")
			first := regexp.MustCompile(`(?m)^  id\s+(\S+)$`).FindAllStringSubmatch(again.stdout, -1)
			var ids []string
			for _, m := range first {
				ids = append(ids, m[1])
			}
			if strings.Join(ids, ",") != "OrderPlaced-a,OrderCancelled-b,OrderPlaced-c" {
				t.Errorf("after a peek the queue reads %v, want the original order", ids)
			}
		})
	}
}

func TestPeekOfEmptyQueue(t *testing.T) {
	t.Parallel()
	u := acemqtest.Memory(t)
	q := acemqtest.QueueName(t, "empty")
	mq, err := acemq.Connect(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mq.Close() })
	if err := mq.Declare(context.Background(), acemq.Queue{Name: q}); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "-url", u, "peek", q)
	if r.code != exitOK || !strings.Contains(r.stdout, "has no ready messages") {
		t.Errorf("exit status %d, output:\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Bodies and header values are shown safely: a terminal escape in a
// message does not reach the terminal as it is.
func TestSafe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"plain text", `{"id":"A-1"}`, `{"id":"A-1"}`},
		{"unicode text", "Zoë ✓", "Zoë ✓"},
		{"escape sequence", "\x1b[2Jgone", `"\x1b[2Jgone"`},
		{"newline", "a\nb", `"a\nb"`},
		{"invalid utf-8", "\xff\xfe", `"\xff\xfe"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := safe(tt.in); got != tt.want {
				t.Errorf("safe(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			u := b.url(t)
			q := acemqtest.QueueName(t, "replay")
			mq := deadLetters(t, u, q, "OrderPlaced", "OrderCancelled", "OrderPlaced", "OrderPlaced")
			dlq := acemq.DeadLetterQueue(q)
			tests := []struct {
				name       string
				args       []string
				report     string
				code       int
				stderr     string
				work, left int // ready on q and on dlq afterwards
			}{
				{"one type, limited", []string{"-type", "OrderPlaced", "-limit", "2"}, "moved 2, skipped 1, failed 0", exitOK, "", 2, 2},
				{"a type there is none of", []string{"-type", "Nope"}, "moved 0, skipped 2, failed 0", exitFailure,
					"acemq: replay: no message on " + dlq + " is of type Nope (2 looked at, all left where they were)", 2, 2},
				{"the rest of that type", []string{"-type", "OrderPlaced,OrderShipped"}, "moved 1, skipped 1, failed 0", exitOK, "", 3, 1},
				{"everything, paced", []string{"-rate", "50", "-progress", "1ms"}, "moved 1, skipped 0, failed 0", exitOK, "", 4, 0},
				{"nothing left", nil, "moved 0, skipped 0, failed 0", exitOK, "", 4, 0},
			}
			for _, tt := range tests { // in order: each starts where the last ended
				args := append([]string{"-url", u, "replay", dlq, q}, tt.args...)
				r := runCLI(t, args...)
				if r.code != tt.code {
					t.Fatalf("%s: exit status %d, want %d; stderr:\n%s", tt.name, r.code, tt.code, r.stderr)
				}
				if !strings.Contains(r.stderr, tt.stderr) {
					t.Errorf("%s: stderr does not say %q:\n%s", tt.name, tt.stderr, r.stderr)
				}
				if !strings.Contains(r.stdout, tt.report) {
					t.Errorf("%s: the report is not %q:\n%s", tt.name, tt.report, r.stdout)
				}
				if w, l := ready(t, mq, q), ready(t, mq, dlq); w != tt.work || l != tt.left {
					t.Errorf("%s: %d on %s and %d on %s, want %d and %d", tt.name, w, q, l, dlq, tt.work, tt.left)
				}
			}
		})
	}
}

func TestReplayProgressAndInterrupt(t *testing.T) {
	t.Parallel()
	u := acemqtest.Memory(t)
	q := acemqtest.QueueName(t, "slow")
	mq := deadLetters(t, u, q, "A", "A", "A", "A", "A", "A")
	dlq := acemq.DeadLetterQueue(q)

	// Two a second: the progress printer runs several times before ctx
	// ends the replay part way.
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	var out, errOut strings.Builder
	code := run(ctx, []string{"-url", u, "replay", dlq, q, "-rate", "2", "-progress", "100ms"}, &out, &errOut)
	if code != exitFailure {
		t.Errorf("an interrupted replay exits %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "replay: moved 1, skipped 0, failed 0 (of 6 ready at the start)") {
		t.Errorf("no progress line on stderr:\n%s", errOut.String())
	}
	if !strings.Contains(errOut.String(), "acemq: replay interrupted") {
		t.Errorf("the interruption is not reported:\n%s", errOut.String())
	}
	if w, l := ready(t, mq, q), ready(t, mq, dlq); w+l != 6 || w == 0 || l == 0 {
		t.Errorf("%d on %s and %d on %s: want all 6 between them, some moved and some not", w, q, l, dlq)
	}
}

// A filtered replay that would hold more messages than a RabbitMQ
// connection has channels for stops, says why, and leaves them in place.
func TestReplayStopsBeforeHoldingTooMany(t *testing.T) {
	t.Parallel()
	u := acemqtest.Memory(t)
	ctx := context.Background()
	mq, err := acemq.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mq.Close() })
	if err := mq.Declare(ctx, acemq.Queue{Name: "work"}, acemq.Queue{Name: "work.dlq"}); err != nil {
		t.Fatal(err)
	}
	bodies := make([]acemq.Raw, maxSkipped+5)
	for i := range bodies {
		bodies[i] = acemq.Raw("{}")
	}
	for _, res := range acemq.NewPublisher[acemq.Raw](mq, "", "work.dlq", acemq.TypeName("A")).SendAll(ctx, bodies) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	r := runCLI(t, "-url", u, "replay", "work.dlq", "work", "-type", "B")
	if r.code != exitFailure {
		t.Errorf("exit status %d, want 1", r.code)
	}
	if !strings.Contains(r.stderr, fmt.Sprintf("replay stopped after leaving %d messages at the head of work.dlq (%d of other types;", maxSkipped, maxSkipped)) {
		t.Errorf("the reason is not given:\n%s", r.stderr)
	}
	if n := ready(t, mq, "work.dlq"); n != len(bodies) {
		t.Errorf("%d messages on work.dlq, want all %d", n, len(bodies))
	}
	// A dry run holds every message it lists: it stops at the same bound.
	r = runCLI(t, "-url", u, "replay", "work.dlq", "work", "-dry-run", "-progress", "0")
	if r.code != exitFailure || !strings.Contains(r.stderr, fmt.Sprintf("replay -dry-run stopped after looking at %d messages of work.dlq", maxSkipped)) ||
		!strings.Contains(r.stderr, "-limit") {
		t.Errorf("dry run past the bound: exit status %d, stderr:\n%s", r.code, r.stderr)
	}
	if n, w := ready(t, mq, "work.dlq"), ready(t, mq, "work"); n != len(bodies) || w != 0 {
		t.Errorf("after the dry run %d messages on work.dlq and %d on work, want all %d and 0", n, w, len(bodies))
	}
}

func TestReplayToAMissingQueueFailsBeforeAnyCount(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			u := b.url(t)
			q := acemqtest.QueueName(t, "nowhere")
			mq := deadLetters(t, u, q, "A", "A")
			dlq := acemq.DeadLetterQueue(q)
			missing := acemqtest.QueueName(t, "missing")
			r := runCLI(t, "-url", u, "replay", dlq, missing)
			if r.code != exitFailure {
				t.Errorf("exit status %d, want 1", r.code)
			}
			if r.stdout != "" {
				t.Errorf("counts printed before the error:\n%s", r.stdout)
			}
			if !strings.Contains(r.stderr, missing) {
				t.Errorf("the error does not name %s:\n%s", missing, r.stderr)
			}
			if n := ready(t, mq, dlq); n != 2 {
				t.Errorf("%d messages on %s, want both left in place", n, dlq)
			}
		})
	}
}

func TestPeekHidesBrokerBookkeepingUnlessVerbose(t *testing.T) {
	t.Parallel()
	u := acemqtest.Memory(t)
	q := acemqtest.QueueName(t, "bookkeeping")
	ctx := context.Background()
	mq, err := acemq.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mq.Close() })
	if err := mq.Declare(ctx, acemq.Queue{Name: q}); err != nil {
		t.Fatal(err)
	}
	err = mq.Transport().Publish(ctx, transport.Message{RoutingKey: q, ContentType: "application/json", Body: []byte("{}"), Headers: map[string]any{
		"x-death":              []any{map[string]any{"count": int64(1), "queue": "orders", "reason": "rejected"}},
		"x-first-death-queue":  "orders",
		"x-first-death-reason": "rejected",
		"x-tenant":             "acme",
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "-url", u, "peek", q)
	for _, want := range []string{"x-tenant = acme", "broker       3 bookkeeping headers hidden (x-death, x-first-death-queue, x-first-death-reason); -v shows them"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("peek does not show %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "x-first-death-queue =") {
		t.Errorf("peek shows a bookkeeping header without -v:\n%s", r.stdout)
	}
	r = runCLI(t, "-url", u, "peek", q, "-v")
	for _, want := range []string{"x-tenant = acme", "x-first-death-queue = orders", "x-first-death-reason = rejected", "x-death = "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("peek -v does not show %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "hidden") {
		t.Errorf("peek -v still hides headers:\n%s", r.stdout)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
)

// step is the payload of the blocked-key test.
type step struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// blockedKey is an ordered consumer on memory whose key order-7 is
// blocked: its message 1 (ID m1) was rejected, 2 and 3 are held.
type blockedKey struct {
	url, queue string
	ctx        context.Context
	mq         *acemq.Conn

	mu      sync.Mutex
	seen    []int
	failing bool
}

// newBlockedKey starts the consumer, publishes order-7's three messages
// and waits until the key is blocked with two held; the consumer stops
// when the test ends.
func newBlockedKey(t *testing.T) *blockedKey {
	t.Helper()
	b := &blockedKey{url: acemqtest.Memory(t), queue: acemqtest.QueueName(t, "orders"), failing: true}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	b.ctx = ctx
	mq, err := acemq.Connect(ctx, b.url, acemq.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mq.Close() })
	b.mq = mq
	cons, err := acemq.NewConsumer(mq, b.queue, func(_ context.Context, m *acemq.Message[step]) acemq.Ack {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.seen = append(b.seen, m.Payload.N)
		if m.Payload.N == 1 && b.failing {
			return acemq.Reject(errors.New("customer 42 does not exist"))
		}
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2, BlockOnFailure: true}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	for n := 1; n <= 3; n++ {
		body, _ := json.Marshal(step{Key: "order-7", N: n})
		err := mq.Transport().Publish(ctx, transport.Message{Exchange: b.queue, MessageID: fmt.Sprintf("m%d", n),
			Headers: map[string]any{"x-acemq-key": "order-7"}, Body: body, ContentType: "application/json"})
		if err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		keys, err := acemq.BlockedKeys(ctx, mq, b.queue)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 1 && keys[0].Held == 2 {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("order-7 not blocked with 2 held: %v", keys)
		}
	}
}

// heal makes message 1 succeed from now on.
func (b *blockedKey) heal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failing = false
}

// waitHandled waits until the handler has run n times and returns the
// numbers it saw, in order.
func (b *blockedKey) waitHandled(t *testing.T, n int) []int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b.mu.Lock()
		seen := append([]int(nil), b.seen...)
		b.mu.Unlock()
		if len(seen) >= n {
			return seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("the handler ran for %v, want %d messages", seen, n)
		}
	}
}

// TestKeys: keys list shows a key an ordered consumer blocked, with its
// held count and reason; keys release runs its held messages; a key not
// blocked is an error.
func TestKeys(t *testing.T) {
	t.Parallel()
	b := newBlockedKey(t)
	url, queue := b.url, b.queue
	r := runCLI(t, "-url", url, "keys", "list", queue)
	if r.code != exitOK {
		t.Fatalf("keys list: exit %d, stderr %s", r.code, r.stderr)
	}
	for _, want := range []string{"KEY", "HELD", "order-7  2", "m1", "customer 42 does not exist", "1 blocked"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("keys list does not show %q:\n%s", want, r.stdout)
		}
	}

	r = runCLI(t, "-url", url, "keys", "release", queue, "order-8")
	if r.code != exitFailure || !strings.Contains(r.stderr, `key "order-8" of queue`) || !strings.Contains(r.stderr, "is not blocked") {
		t.Errorf("releasing a key not blocked: exit %d, stderr %s", r.code, r.stderr)
	}
	b.heal()
	r = runCLI(t, "-url", url, "keys", "release", queue, "order-7")
	if r.code != exitOK || !strings.Contains(r.stdout, `released key order-7`) {
		t.Fatalf("keys release: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if want := "message m1, which blocked it, stays in " + queue + ".dlq"; !strings.Contains(r.stdout, want) {
		t.Errorf("keys release does not say %q:\n%s", want, r.stdout)
	}
	if !strings.Contains(r.stdout, "-rerun") {
		t.Errorf("keys release does not say how to re-run it:\n%s", r.stdout)
	}
	if got := b.waitHandled(t, 3); fmt.Sprint(got) != fmt.Sprint([]int{1, 2, 3}) {
		t.Errorf("handled %v, want [1 2 3]", got)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r = runCLI(t, "-url", url, "keys", "list", queue)
		if strings.Contains(r.stdout, "no blocked keys") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys list after the release:\n%s%s", r.stdout, r.stderr)
		}
	}
}

// TestKeysSkip: keys release -skip runs the held messages only and says
// where the message that blocked the key went (the queue's .dlq, where the
// consumer dead-lettered it) and its ID; the message is still there.
func TestKeysSkip(t *testing.T) {
	t.Parallel()
	b := newBlockedKey(t)
	r := runCLI(t, "-url", b.url, "keys", "release", "-skip", b.queue, "order-7")
	if r.code != exitOK || !strings.Contains(r.stdout, "released key order-7") {
		t.Fatalf("keys release -skip: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	dlq := acemq.DeadLetterQueue(b.queue)
	if want := "message m1, which blocked it, stays in " + dlq + "; it was skipped"; !strings.Contains(r.stdout, want) {
		t.Errorf("keys release -skip does not say %q:\n%s", want, r.stdout)
	}
	if got := b.waitHandled(t, 3); fmt.Sprint(got) != fmt.Sprint([]int{1, 2, 3}) {
		t.Errorf("handled %v, want [1 2 3]", got)
	}
	where, err := findMessage(b.ctx, b.mq, "m1", dlq, acemq.ParkingQueue(b.queue))
	if err != nil || where != dlq {
		t.Errorf("after the skip m1 is in %q (%v), want %s", where, err, dlq)
	}
}

// TestKeysRerun: keys release -rerun runs the message that blocked the key
// (from .dlq) before the held ones.
func TestKeysRerun(t *testing.T) {
	t.Parallel()
	b := newBlockedKey(t)
	b.heal()
	r := runCLI(t, "-url", b.url, "keys", "release", "-rerun", b.queue, "order-7")
	if r.code != exitOK || !strings.Contains(r.stdout, "the message that blocked it runs next") {
		t.Fatalf("keys release -rerun: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if got, want := b.waitHandled(t, 4), []int{1, 1, 2, 3}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("handled %v, want %v", got, want)
	}
}

func TestKeysUsage(t *testing.T) {
	t.Parallel()
	mem := acemqtest.Memory(t)
	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no action", []string{"keys"}, exitUsage, "say list or release"},
		{"unknown action", []string{"keys", "purge", "q"}, exitUsage, "say list or release"},
		{"list without a queue", []string{"keys", "list"}, exitUsage, "name exactly one queue"},
		{"release without a key", []string{"keys", "release", "q"}, exitUsage, "name the queue and the key"},
		{"release an empty key", []string{"keys", "release", "q", ""}, exitUsage, "the key is empty"},
		{"rerun and skip", []string{"keys", "release", "-rerun", "-skip", "q", "k"}, exitUsage, "not both"},
		{"list with -rerun", []string{"keys", "list", "-rerun", "q"}, exitUsage, "are for keys release"},
		{"list of a plain queue", []string{"keys", "list", "nowhere"}, exitFailure, `queue "nowhere" has no blocked-key registry`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, append([]string{"-url", mem}, tt.args...)...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d (want %d), stderr does not say %q:\n%s", r.code, tt.code, tt.want, r.stderr)
			}
		})
	}
}

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

// TestKeys: keys list shows a key an ordered consumer blocked, with its
// held count and reason; keys release runs its held messages; a key not
// blocked is an error.
func TestKeys(t *testing.T) {
	t.Parallel()
	url := acemqtest.Memory(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mq, err := acemq.Connect(ctx, url, acemq.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer mq.Close()
	queue := acemqtest.QueueName(t, "orders")
	var mu sync.Mutex
	var seen []int
	failing := true
	cons, err := acemq.NewConsumer(mq, queue, func(_ context.Context, m *acemq.Message[step]) acemq.Ack {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, m.Payload.N)
		if m.Payload.N == 1 && failing {
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
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for n := 1; n <= 3; n++ {
		body, _ := json.Marshal(step{Key: "order-7", N: n})
		err := mq.Transport().Publish(ctx, transport.Message{Exchange: queue, MessageID: "m" + string(rune('0'+n)),
			Headers: map[string]any{"x-acemq-key": "order-7"}, Body: body, ContentType: "application/json"})
		if err != nil {
			t.Fatal(err)
		}
	}
	var r result
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r = runCLI(t, "-url", url, "keys", "list", queue)
		if strings.Contains(r.stdout, "order-7  2") || time.Now().After(deadline) {
			break
		}
	}
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
	mu.Lock()
	failing = false
	mu.Unlock()
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
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the held messages did not run: %v", seen)
		}
	}
	mu.Lock()
	if got := seen; len(got) != 3 || got[1] != 2 || got[2] != 3 {
		t.Errorf("handled %v, want [1 2 3]", got)
	}
	mu.Unlock()
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

// TestKeysRerun: keys release -rerun runs the message that blocked the key
// (from .dlq) before the held ones.
func TestKeysRerun(t *testing.T) {
	t.Parallel()
	url := acemqtest.Memory(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mq, err := acemq.Connect(ctx, url, acemq.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer mq.Close()
	queue := acemqtest.QueueName(t, "orders")
	var mu sync.Mutex
	var seen []int
	failing := true
	cons, err := acemq.NewConsumer(mq, queue, func(_ context.Context, m *acemq.Message[step]) acemq.Ack {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, m.Payload.N)
		if m.Payload.N == 1 && failing {
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
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for n := 1; n <= 3; n++ {
		body, _ := json.Marshal(step{Key: "order-7", N: n})
		err := mq.Transport().Publish(ctx, transport.Message{Exchange: queue, MessageID: "m" + string(rune('0'+n)),
			Headers: map[string]any{"x-acemq-key": "order-7"}, Body: body, ContentType: "application/json"})
		if err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		keys, err := acemq.BlockedKeys(ctx, mq, queue)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 1 && keys[0].Held == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order-7 not blocked with 2 held: %v", keys)
		}
	}
	mu.Lock()
	failing = false
	mu.Unlock()
	r := runCLI(t, "-url", url, "keys", "release", "-rerun", queue, "order-7")
	if r.code != exitOK || !strings.Contains(r.stdout, "the message that blocked it runs next") {
		t.Fatalf("keys release -rerun: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the re-run and held messages did not run: %v", seen)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int{1, 1, 2, 3}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("handled %v, want %v", seen, want)
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

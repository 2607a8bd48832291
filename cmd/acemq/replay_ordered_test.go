package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

// TestReplayIntoAnOrderedQueue: replay into an ordered consumer's queue
// (there is no queue of that name, only its exchange and partitions)
// publishes to its exchange, and each message comes back to the consumer
// with its key.
func TestReplayIntoAnOrderedQueue(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			u := b.url(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			mq, err := acemq.Connect(ctx, u, acemq.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			defer mq.Close()
			queue := acemqtest.QueueName(t, "orders")
			keys := []string{"order-1", "order-2", "order-3", "order-4", "order-5", "order-6"}

			var mu sync.Mutex
			failing := true
			var replayed []string // key/n as the handler saw them after the replay
			cons, err := acemq.NewConsumer(mq, queue, func(_ context.Context, m *acemq.Message[step]) acemq.Ack {
				mu.Lock()
				defer mu.Unlock()
				if failing {
					return acemq.Reject(errors.New("not yet"))
				}
				replayed = append(replayed, fmt.Sprintf("%s/%d key %s", m.Payload.Key, m.Payload.N, m.Envelope.Key))
				return acemq.Done()
			}, acemq.Ordered(acemq.OrderPolicy{Partitions: 4}))
			if err != nil {
				t.Fatal(err)
			}
			acemqtest.DeleteAfter(t, u, cons)
			runCtx, stop := context.WithCancel(ctx)
			ran := make(chan error, 1)
			go func() { ran <- cons.Run(runCtx) }()
			defer func() {
				stop()
				if err := <-ran; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			pub := acemq.NewPublisher[step](mq, queue, "", acemq.KeyBy(func(s step) string { return s.Key }))
			for _, k := range keys {
				if err := pub.Send(ctx, step{Key: k, N: 1}); err != nil {
					t.Fatal(err)
				}
			}
			dlq := acemq.DeadLetterQueue(queue)
			if n := readyAfter(t, mq, dlq, len(keys)); n != len(keys) {
				t.Fatalf("%d messages on %s, want %d", n, dlq, len(keys))
			}
			mu.Lock()
			failing = false
			mu.Unlock()

			// A dry run names the exchange and each message's key, and
			// leaves every message where it is.
			r := runCLI(t, "-url", u, "replay", dlq, queue, "-dry-run", "-progress", "0")
			if r.code != exitOK || !strings.Contains(r.stdout, queue+" (exchange, key order-4)\n") ||
				!strings.Contains(r.stdout, fmt.Sprintf("would move %d, skipped 0", len(keys))) {
				t.Errorf("dry run into the ordered queue %s: exit %d\n%s%s", queue, r.code, r.stdout, r.stderr)
			}
			if n := readyAfter(t, mq, dlq, len(keys)); n != len(keys) {
				t.Fatalf("%d messages on %s after the dry run, want %d", n, dlq, len(keys))
			}

			r = runCLI(t, "-url", u, "replay", dlq, queue)
			if r.code != exitOK {
				t.Fatalf("replay into the ordered queue %s: exit %d, stderr:\n%s", queue, r.code, r.stderr)
			}
			for _, want := range []string{"an ordered queue: through its exchange " + queue, fmt.Sprintf("moved %d, skipped 0, failed 0", len(keys))} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("the report does not say %q:\n%s", want, r.stdout)
				}
			}
			want := make([]string, len(keys))
			for i, k := range keys {
				want[i] = fmt.Sprintf("%s/1 key %s", k, k)
			}
			var got []string
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				mu.Lock()
				got = slices.Sorted(slices.Values(replayed))
				mu.Unlock()
				if len(got) >= len(want) {
					break
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("after the replay the consumer handled %q; want %q", got, want)
			}
			if n := ready(t, mq, dlq); n != 0 {
				t.Errorf("%d messages left on %s", n, dlq)
			}
		})
	}
}

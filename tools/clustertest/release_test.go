package clustertest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/google/uuid"
)

// TestReleaseRerunOnTheCluster: with quorum queues on three nodes, key k
// blocked at 10 with 11…50 held; a release with a re-run while 10 still
// fails blocks k again by 10 (the held ones still held, the re-run queue a
// quorum queue); once the cause is fixed, a release with a re-run handles
// 10, 11, …, 50 and then newer ones, in that order.
func TestReleaseRerunOnTheCluster(t *testing.T) {
	cl := needCluster(t)
	const partitions = 2
	q := acemqtest.QueueName(t, "release")
	sum := sha256.Sum256([]byte("k"))
	held, rerun := fmt.Sprintf("%s.held.%x", q, sum[:8]), fmt.Sprintf("%s.rerun.%x", q, sum[:8])
	t.Cleanup(func() {
		deleteOrdered(t, cl, q, partitions)
		c, err := acemq.Connect(ctxT(t, time.Minute), cl.URLs(), acemq.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Errorf("cleaning up: %v", err)
			return
		}
		defer c.Close()
		for _, n := range []string{held, rerun} {
			if err := c.Transport().DeleteQueue(ctxT(t, time.Minute), n); err != nil {
				t.Errorf("deleting %s: %v", n, err)
			}
		}
	})
	c, err := acemq.Connect(ctxT(t, time.Minute), cl.URLs(), acemq.WithQuorumQueues(), acemq.WithLogger(slog.New(slog.DiscardHandler)),
		acemq.WithRetryPolicy(acemq.RetryPolicy{MaxAttempts: 2, Delays: []time.Duration{20 * time.Millisecond}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var (
		failing atomic.Bool
		mu      sync.Mutex
		seen    []int
	)
	failing.Store(true)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		mu.Lock()
		seen = append(seen, m.Payload.N)
		mu.Unlock()
		if m.Payload.N == 10 && failing.Load() {
			return acemq.Reject(errors.New("customer 42 does not exist"))
		}
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: partitions, BlockOnFailure: true}), acemq.DeclareContext(ctxT(t, time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(ctx) }()
	t.Cleanup(func() { stop(); <-ran })
	handled := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
	publish := func(from, to int) {
		for n := from; n <= to; n++ {
			body, _ := json.Marshal(Step{Key: "k", N: n})
			err := c.Transport().Publish(ctxT(t, 30*time.Second), transport.Message{Exchange: q, MessageID: uuid.NewString(),
				Type: "Step", ContentType: "application/json", Headers: map[string]any{"x-acemq-key": "k"}, Body: body})
			if err != nil {
				t.Fatalf("publishing %d: %v", n, err)
			}
		}
	}
	waitFor := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(d); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v (handled %v)", what, d, handled())
			}
		}
	}
	blockedBy := func(held int) string {
		var id string
		waitFor("k blocked, 40 held", 30*time.Second, func() bool {
			keys, err := acemq.BlockedKeys(ctxT(t, 30*time.Second), c, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) == 1 && keys[0].Held == held {
				id = keys[0].MessageID
				return true
			}
			return false
		})
		return id
	}
	seq := func(from, to int) []int {
		var out []int
		for n := from; n <= to; n++ {
			out = append(out, n)
		}
		return out
	}

	publish(1, 50)
	first := blockedBy(40)
	if err := acemq.ReleaseKey(ctxT(t, 30*time.Second), c, q, "k", acemq.RerunFailed()); err != nil {
		t.Fatal(err)
	}
	waitFor("10 run again", 30*time.Second, func() bool { return len(handled()) >= 11 })
	if again := blockedBy(40); again != first {
		t.Fatalf("blocked again by %s, want %s", again, first)
	}
	if got, want := handled(), append(seq(1, 10), 10); !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	if err := c.Transport().Declare(ctxT(t, 30*time.Second), transport.Queue{Name: rerun}); !errors.Is(err, transport.ErrTopologyConflict) {
		t.Errorf("declaring %s as a classic queue: %v, want a conflict (it is a quorum queue)", rerun, err)
	}

	failing.Store(false)
	if err := acemq.ReleaseKey(ctxT(t, 30*time.Second), c, q, "k", acemq.RerunFailed()); err != nil {
		t.Fatal(err)
	}
	publish(51, 55)
	want := append(append(seq(1, 10), 10, 10), seq(11, 55)...)
	waitFor("the release", 60*time.Second, func() bool { return len(handled()) >= len(want) })
	if got := handled(); !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	waitFor("the registry empty", 30*time.Second, func() bool {
		keys, err := acemq.BlockedKeys(ctxT(t, 30*time.Second), c, q)
		return err == nil && len(keys) == 0
	})
}

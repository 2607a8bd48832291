package browsertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
)

// blocked is an ordered consumer whose key order-7 is blocked: its
// message 1 was rejected, 2 and 3 are held.
type blocked struct {
	queue   string
	mu      sync.Mutex
	seen    []int
	failing bool
}

// newBlocked starts the consumer, stopped when the test ends, and waits
// until order-7 is blocked with two held. On a RabbitMQ without the
// consistent-hash plugin it returns nil, and the test leaves the blocked
// key out (it fails instead with ACEMQ_REQUIRE_BROKER=1).
func newBlocked(t *testing.T, ctx context.Context, mq *acemq.Conn, url string) *blocked {
	t.Helper()
	b := &blocked{queue: acemqtest.QueueName(t, "shipments"), failing: true}
	acemqtest.DeleteQueuesAfter(t, url, b.queue)
	cons, err := acemq.NewConsumer(mq, b.queue, func(_ context.Context, m *acemq.Message[step]) acemq.Ack {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.seen = append(b.seen, m.Payload.N)
		if m.Payload.N == 1 && b.failing {
			return acemq.Reject(errors.New("warehouse 9 is closed"))
		}
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2, BlockOnFailure: true}))
	if errors.Is(err, transport.ErrMissingPlugin) && os.Getenv("ACEMQ_REQUIRE_BROKER") != "1" {
		t.Logf("LEFT OUT: the blocked key part; the broker lacks the consistent-hash plugin: %v", err)
		return nil
	}
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
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = mq.Delete(dctx, cons.Topology()...)
	})
	for n := 1; n <= 3; n++ {
		body, _ := json.Marshal(step{Key: "order-7", N: n})
		err := mq.Transport().Publish(ctx, transport.Message{Exchange: b.queue, MessageID: fmt.Sprintf("s%d", n),
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
func (b *blocked) heal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failing = false
}

// wantSeen waits until the handler has seen want, in order.
func (b *blocked) wantSeen(t *testing.T, want ...int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b.mu.Lock()
		got := slices.Clone(b.seen)
		b.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ordered handler saw %v, want %v (the failure, its re-run, then the held ones)", got, want)
		}
	}
}

package acemq_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// Step is the payload of the ordering tests: the N-th message of Key.
type Step struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// orderedQueue names an ordered queue of p partitions and, on RabbitMQ,
// deletes everything an ordered consumer of it declares when the test
// ends: its exchange, partitions, .dlq, .parked, members, registry and the
// held queues of keys.
func orderedQueue(t *testing.T, url string, p int, keys ...string) string {
	t.Helper()
	q := acemqtestQueue(t)
	if strings.HasPrefix(url, "memory:") {
		return q
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := acemq.Connect(ctx, url, acemq.WithLogger(quiet))
		if err != nil {
			t.Errorf("cleaning up %s: %v", q, err)
			return
		}
		defer c.Close()
		tr := c.Transport()
		names := []string{acemq.DeadLetterQueue(q), acemq.ParkingQueue(q), q + ".members", q + ".blocked", q + ".status", q + ".fence"}
		for i := range p + 1 {
			names = append(names, acemq.PartitionQueue(q, i))
		}
		for _, k := range keys {
			names = append(names, heldQueueOf(q, k), rerunQueueOf(q, k))
		}
		// The tiers of the policies these tests give, should a consumer
		// that failed to start have declared them (a missing queue is no
		// error).
		for _, d := range append(inPlace.Delays, acemq.DefaultRetryPolicy().Delays...) {
			names = append(names, acemq.RetryQueue(q, d))
		}
		for _, n := range names {
			if err := tr.DeleteQueue(ctx, n); err != nil {
				t.Errorf("deleting %s: %v", n, err)
			}
		}
		if err := tr.DeleteExchange(ctx, q); err != nil {
			t.Errorf("deleting exchange %s: %v", q, err)
		}
	})
	return q
}

// heldQueueOf is the held queue of key, as the engine names it.
func heldQueueOf(q, key string) string {
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("%s.held.%x", q, sum[:8])
}

// rerunQueueOf is the re-run queue of key, as ReleaseKey names it.
func rerunQueueOf(q, key string) string {
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("%s.rerun.%x", q, sum[:8])
}

// keyed renders s as a message keyed s.Key for the exchange q, as a
// Publisher with the Key option sends it.
func keyed(t testing.TB, q string, s Step) transport.Message {
	body, err := json.Marshal(s)
	require.NoError(t, err)
	return transport.Message{
		Exchange: q, MessageID: uuid.NewString(), Type: "Step", ContentType: "application/json",
		Headers: map[string]any{"x-acemq-key": s.Key}, Body: body,
	}
}

// publishAll publishes ms, confirmed, many at a time but never two of one
// key at once: a batch goes out over several channels, which may reorder
// it, so a key's next message waits for the confirm of the one before.
func publishAll(t testing.TB, c *acemq.Conn, ms []transport.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bp, ok := c.Transport().(transport.BatchPublisher)
	if !ok {
		for _, m := range ms {
			require.NoError(t, c.Transport().Publish(ctx, m))
		}
		return
	}
	for len(ms) > 0 {
		keys := map[any]bool{}
		n := 0
		for n < len(ms) && !keys[ms[n].Headers["x-acemq-key"]] {
			if k, ok := ms[n].Headers["x-acemq-key"]; ok {
				keys[k] = true
			}
			n++
		}
		for i, err := range bp.PublishBatch(ctx, ms[:n]) {
			require.NoError(t, err, "message %d", i)
		}
		ms = ms[n:]
	}
}

// retriedFirst says, by a hash of key and number, whether the first
// attempt of a message asks for a retry: 5% of them.
func retriedFirst(key string, n int) bool {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", key, n))
	return binary.BigEndian.Uint32(sum[:4])%20 == 0
}

// orderLog records what handlers saw, per key, and checks the promise:
// per key the numbers never go back (a repeat is the only exception), none
// is missing, no two handlers of a key overlap, and keys overlap in time.
type orderLog struct {
	mu      sync.Mutex
	seen    map[string][]int
	running map[string]int
	overlap bool // two handlers of one key ran at once
	active  int
	peak    int // most handlers running at once, over all keys
	done    map[string]map[int]bool
	count   int // distinct (key, n) handled
}

func newOrderLog() *orderLog {
	return &orderLog{seen: map[string][]int{}, running: map[string]int{}, done: map[string]map[int]bool{}}
}

// start records the start of a handler of s and returns its end.
func (l *orderLog) start(s Step) func(ok bool) {
	l.mu.Lock()
	l.seen[s.Key] = append(l.seen[s.Key], s.N)
	l.running[s.Key]++
	if l.running[s.Key] > 1 {
		l.overlap = true
	}
	l.active++
	l.peak = max(l.peak, l.active)
	l.mu.Unlock()
	return func(ok bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.running[s.Key]--
		l.active--
		if !ok {
			return
		}
		if l.done[s.Key] == nil {
			l.done[s.Key] = map[int]bool{}
		}
		if !l.done[s.Key][s.N] {
			l.done[s.Key][s.N] = true
			l.count++
		}
	}
}

// handled is the number of distinct messages handled.
func (l *orderLog) handled() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

// check asserts the promise for keys × 1..n, and that keys ran in
// parallel.
func (l *orderLog) check(t *testing.T, keys []string, n int) {
	t.Helper()
	l.checkInOrder(t, keys, n)
	l.mu.Lock()
	defer l.mu.Unlock()
	require.GreaterOrEqual(t, l.peak, 2, "keys never overlapped in time")
}

// checkInOrder asserts the promise for keys × 1..n: one handler of a key at
// a time, a key's numbers never going back, none missing.
func (l *orderLog) checkInOrder(t *testing.T, keys []string, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.False(t, l.overlap, "two handlers of one key ran at once")
	for _, k := range keys {
		seq := l.seen[k]
		for i := 1; i < len(seq); i++ {
			require.GreaterOrEqual(t, seq[i], seq[i-1], "key %s went back: %v", k, seq)
		}
		for i := 1; i <= n; i++ {
			require.True(t, l.done[k][i], "key %s: message %d is missing (saw %v)", k, i, seq)
		}
	}
}

// within waits up to d for cond.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

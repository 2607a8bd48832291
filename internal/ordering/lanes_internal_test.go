package ordering

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
)

// ackingHost is a Host that acks every attempt and records, per key, the
// order it saw, and how many attempts of a key ran at once at most.
type ackingHost struct {
	mu      sync.Mutex
	seen    map[string][]int
	running map[string]int
	overlap int
	retried map[string]bool // a key's first delivery asks for one retry in place
}

func (h *ackingHost) Handle(_ context.Context, a *Attempt) (bool, time.Duration) {
	d := a.Delivery()
	key := KeyOf(d.Headers)
	h.mu.Lock()
	h.running[key]++
	h.overlap = max(h.overlap, h.running[key])
	retry := !h.retried[key]
	h.retried[key] = true
	h.mu.Unlock()
	time.Sleep(time.Millisecond)
	h.mu.Lock()
	h.running[key]--
	if !retry {
		var n int
		fmt.Sscanf(string(d.Body), "%d", &n)
		h.seen[key] = append(h.seen[key], n)
	}
	h.mu.Unlock()
	if retry {
		return true, time.Millisecond
	}
	_ = d.Ack()
	return false, 0
}

func (h *ackingHost) Relocate(ctx context.Context, msg transport.Message, from *transport.Delivery) (error, error) {
	return nil, fmt.Errorf("this host moves nothing")
}

func (h *ackingHost) Backoff(bool) time.Duration { return time.Millisecond }

// The lanes run each key's messages one at a time, in the order they were
// published, a retry in place included, while the keys share the workers.
func TestRunKeepsEachKeysOrder(t *testing.T) {
	t.Parallel()
	tr := memory.New(t.Name())
	t.Cleanup(func() { _ = tr.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const queue, parts, keys, each = "orders", 3, 5, 20
	topo := []transport.Topology{transport.Exchange{Name: queue, Kind: "x-consistent-hash", Args: map[string]any{"hash-header": HeaderKey}}}
	for i := range parts {
		q := PartitionQueue(queue, i)
		topo = append(topo, transport.Queue{Name: q, Args: map[string]any{"x-single-active-consumer": true}},
			transport.Binding{Exchange: queue, Key: "1", Queue: q})
	}
	topo = append(topo, transport.Queue{Name: BlockedQueue(queue)})
	require.NoError(t, tr.Declare(ctx, topo...))
	for n := range each {
		for k := range keys {
			require.NoError(t, tr.Publish(ctx, transport.Message{Exchange: queue, Body: []byte(fmt.Sprint(n)),
				Headers: map[string]any{HeaderKey: fmt.Sprintf("k%d", k)}}))
		}
	}
	h := &ackingHost{seen: map[string][]int{}, running: map[string]int{}, retried: map[string]bool{}}
	l, _ := transport.Transport(tr).(transport.Leaser)
	ho, _ := transport.Transport(tr).(transport.HandOverConsumer)
	run := NewRun(Config{
		Broker: Broker{T: tr, Leaser: l, HandOver: ho}, Queue: queue, Partitions: parts,
		Concurrency: 4, Prefetch: 50, Ops: &sync.Map{},
	}, h)
	takeCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		more, err := run.Serve(takeCtx, ctx, 0, stop)
		assert.True(t, more, "Serve reports that its taking ended")
		done <- err
	}()
	want := make([]int, each)
	for i := range want {
		want[i] = i
	}
	require.Eventually(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for k := range keys {
			if len(h.seen[fmt.Sprintf("k%d", k)]) < each {
				return false
			}
		}
		return true
	}, 15*time.Second, 5*time.Millisecond)
	assert.Equal(t, []int{0, 1, 2}, run.Held(), "one instance holds every partition")
	stop()
	require.NoError(t, <-done)
	assert.Empty(t, run.Held(), "nothing held once Serve returned")
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Equal(t, 1, h.overlap, "one attempt of a key at a time")
	for k, got := range h.seen {
		assert.True(t, slices.Equal(want, got), "key %s ran %v", k, got)
	}
}

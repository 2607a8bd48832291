package hardtest_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

// flood publishes n messages of body to queue, pipelined, window 1024, and
// waits for every confirm. IDs are strconv.Itoa(first+i).
func (r *raw) flood(queue string, first, n int, body []byte) {
	r.t.Helper()
	ctx := ctxT(r.t)
	window := make([]*amqp.DeferredConfirmation, 0, 1024)
	wait := func() {
		for _, dc := range window {
			ok, err := dc.WaitContext(ctx)
			require.NoError(r.t, err)
			require.True(r.t, ok, "nacked")
		}
		window = window[:0]
	}
	for i := range n {
		dc, err := r.ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
			ContentType: "application/json", MessageId: strconv.Itoa(first + i), Body: body,
		})
		require.NoError(r.t, err)
		window = append(window, dc)
		if len(window) == cap(window) {
			wait()
		}
	}
	wait()
}

// TestStuckHandlerHoldsOneWorker: with Concurrency(4), a handler that never
// returns (until the test ends) holds one worker; the other three settle
// everything else, and no more than four handlers ever run at once.
func TestStuckHandlerHoldsOneWorker(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	got, opt := newSettlements(256)
	c := connect(t, url, opt)
	q := queue(t, url, "stuck")
	var running, peak atomic.Int32
	stuck, release := make(chan struct{}), make(chan struct{})
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Order]) acemq.Ack {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if m.Payload.ID == "stuck" {
			close(stuck)
			<-release
		}
		return acemq.Done()
	}, acemq.Concurrency(4), acemq.Prefetch(16))
	require.NoError(t, err)
	start(t, cons)
	t.Cleanup(func() { close(release) }) // runs before the consumer stops

	producer := dialRaw(t, url)
	require.NoError(t, producer.publish(q, amqp.Publishing{ContentType: "application/json", MessageId: "stuck", Body: []byte(`{"id":"stuck"}`)}))
	select {
	case <-stuck:
	case <-time.After(wait):
		t.Fatal("the stuck handler never started")
	}
	producer.flood(q, 0, 100, []byte(`{"id":"other"}`))
	seen := map[string]bool{}
	for len(seen) < 100 {
		s := got.next(t)
		require.Equal(t, acemq.OutcomeAcked, s.Outcome)
		seen[s.Envelope.ID] = true
	}
	assert.NotContains(t, seen, "stuck", "the stuck one has not settled")
	assert.LessOrEqual(t, peak.Load(), int32(4), "Concurrency bounds the handlers running at once")
	assert.EqualValues(t, 1, running.Load(), "only the stuck handler is still running")
}

// TestPrefetchBoundsMemory: with a handler stuck on the first delivery, the
// broker hands the consumer no more than Prefetch deliveries; the rest stay
// in the queue, and the heap holds only those few bodies.
func TestPrefetchBoundsMemory(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	const (
		n        = 400
		size     = 64 << 10 // 25 MiB in the queue
		prefetch = 8
	)
	c := connect(t, url)
	q := queue(t, url, "prefetch")
	started, release := make(chan struct{}, n), make(chan struct{})
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[acemq.Raw]) acemq.Ack {
		started <- struct{}{}
		<-release
		return acemq.Done()
	}, acemq.Concurrency(1), acemq.Prefetch(prefetch))
	require.NoError(t, err)
	producer := dialRaw(t, url)
	producer.flood(q, 0, n, make([]byte, size))
	before := measure()
	start(t, cons)
	t.Cleanup(func() { close(release) })
	<-started
	waitFor(t, "the broker hands out a full prefetch", func() bool { return producer.count(q) == n-prefetch })
	after := measure()
	grew := int64(after.heap) - int64(before.heap)
	t.Logf("heap grew %d KiB holding %d of %d deliveries of %d KiB", grew>>10, prefetch, n, size>>10)
	assert.Equal(t, n-prefetch, producer.count(q), "the rest stay in the queue")
	assert.Less(t, grew, int64(4*prefetch*size), "memory holds about a prefetch of bodies, not the queue")
}

// TestFloodDrainsWithFlatMemory floods a queue with small messages and
// drains it with Concurrency 8 and the default prefetch, sampling the heap
// meanwhile: it stays flat, whatever the queue's length. 100,000 messages
// unless -short (10,000).
func TestFloodDrainsWithFlatMemory(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	began := time.Now()
	c := connect(t, url)
	q := queue(t, url, "flood")
	var handled atomic.Int64
	done := make(chan struct{})
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[Order]) acemq.Ack {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return acemq.Done()
	}, acemq.Concurrency(8))
	require.NoError(t, err)
	producer := dialRaw(t, url)
	producer.flood(q, 0, n, []byte(`{"id":"flood","cents":100}`))
	published := time.Since(began)
	base := measure()

	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			for p := peak.Load(); ms.HeapInuse > p && !peak.CompareAndSwap(p, ms.HeapInuse); p = peak.Load() {
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	drainStart := time.Now()
	start(t, cons)
	select {
	case <-done:
	case <-time.After(5 * wait):
		t.Fatalf("handled %d of %d", handled.Load(), n)
	}
	drained := time.Since(drainStart)
	close(stopSampling)
	sampler.Wait()
	waitFor(t, "the queue is empty", func() bool { return producer.count(q) == 0 })

	hwm := vmHWM(t)
	t.Logf("flood of %d: published in %v, drained in %v (%.0f msg/s), whole test %v; heap in use %d MiB before, peak %d MiB; peak RSS (VmHWM) %d MiB",
		n, published.Round(time.Millisecond), drained.Round(time.Millisecond), float64(n)/drained.Seconds(),
		time.Since(began).Round(time.Millisecond), base.heap>>20, peak.Load()>>20, hwm>>20)
	assert.Less(t, peak.Load(), base.heap+64<<20, "the heap stays flat while the queue drains")
}

// vmHWM reads the process's peak resident set size from /proc.
func vmHWM(t testing.TB) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Logf("no /proc/self/status: %v", err)
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb uint64
			_, _ = fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb << 10
		}
	}
	return 0
}

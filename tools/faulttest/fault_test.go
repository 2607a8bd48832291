package faulttest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// TestFaultCloseAllConnections closes every broker connection three times
// during a ten-second run.
func TestFaultCloseAllConnections(t *testing.T) {
	needCtl(t)
	l := startLoad(t, 4)
	for range 3 {
		time.Sleep(3 * time.Second)
		ctl(t, "close_all_connections", "test")
	}
	time.Sleep(time.Second)
	l.finish()
}

// TestFaultStopStartApp stops the broker application for a few seconds
// during a run. The broker is started again whatever happens.
func TestFaultStopStartApp(t *testing.T) {
	needCtl(t)
	t.Cleanup(func() {
		ctl(t, "start_app")
		ctl(t, "await_startup")
	})
	l := startLoad(t, 4)
	time.Sleep(2 * time.Second)
	ctl(t, "stop_app")
	time.Sleep(3 * time.Second)
	ctl(t, "start_app")
	ctl(t, "await_startup")
	time.Sleep(2 * time.Second)
	l.finish()
}

// TestFaultBlockedConnection raises a memory alarm so the broker blocks
// publishers: a publish then ends with its ctx and Health says why; once
// the alarm clears the same publish goes through.
func TestFaultBlockedConnection(t *testing.T) {
	needCtl(t)
	t.Cleanup(func() { ctl(t, "set_vm_memory_high_watermark", "0.4") })
	l := startLoad(t, 0)
	// Warm up: a publish goes through before the alarm.
	if err := l.tr.Publish(context.Background(), transport.Message{RoutingKey: l.q, MessageID: "before"}); err != nil {
		t.Fatal(err)
	}
	ctl(t, "set_vm_memory_high_watermark", "0")
	// The broker blocks a connection when it next publishes once the alarm
	// is up (its memory monitor notices within a few seconds), so publish
	// until one is written and then waits in vain for its confirm.
	var err error
	var waited time.Duration
	for try := 0; try < 40; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		start := time.Now()
		err = l.tr.Publish(ctx, transport.Message{RoutingKey: l.q, MessageID: fmt.Sprintf("blocked-%d", try)})
		waited = time.Since(start)
		cancel()
		if err != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish while blocked = %v; want DeadlineExceeded", err)
	}
	if waited > 3*time.Second {
		t.Errorf("Publish returned after %v; want about its 500ms deadline", waited)
	}
	deadline := time.Now().Add(10 * time.Second)
	var health error
	for time.Now().Before(deadline) {
		if health = l.tr.Health(context.Background()); health != nil && strings.Contains(health.Error(), "blocked") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if health == nil || !strings.Contains(health.Error(), "blocked") {
		t.Fatalf("Health under a memory alarm = %v; want it to say blocked", health)
	}
	t.Logf("Health while blocked: %v", health)
	// A publish cut short by its ctx while blocked says so, names the
	// alarm, and warns that it may still be delivered.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = l.tr.Publish(ctx, transport.Message{RoutingKey: l.q, MessageID: "named"})
	cancel()
	if !errors.Is(err, rabbitmq.ErrBlocked) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "memory") || !strings.Contains(err.Error(), "may still be delivered") {
		t.Fatalf("Publish while blocked = %v; want ErrBlocked and DeadlineExceeded, naming the alarm and saying it may still be delivered", err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- l.tr.Publish(ctx, transport.Message{RoutingKey: l.q, MessageID: "patient"})
	}()
	time.Sleep(300 * time.Millisecond)
	ctl(t, "set_vm_memory_high_watermark", "0.4")
	if err := <-done; err != nil {
		t.Fatalf("Publish waiting out the alarm: %v", err)
	}
	l.mu.Lock()
	l.confirmed["before"], l.confirmed["patient"] = true, true
	l.mu.Unlock()
	l.healthDown.Store(true)
	l.healthUpAfter.Store(true) // the watcher ran with no publishers; checked above instead
	l.finish()
}

// TestFaultBlockedConnectionBoundsMemory raises a memory alarm and sets
// many more publishers than the confirm window against the blocked
// connection, each retrying with a short ctx: the transport must make them
// wait rather than buffer, so it never holds more than the window and the
// live heap stays within the window's worth of bodies.
func TestFaultBlockedConnectionBoundsMemory(t *testing.T) {
	needCtl(t)
	const (
		window     = 16
		publishers = 8 * window
		bodySize   = 64 << 10
	)
	url := acemqtest.RabbitMQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := rabbitmq.Dial(ctx, url, rabbitmq.Config{ConfirmWindow: window, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer tr.Close()
	q := acemqtest.QueueName(t, "fault-bound")
	if err := tr.Declare(ctx, transport.Queue{Name: q}); err != nil {
		t.Fatal(err)
	}
	acemqtest.DeleteQueuesAfter(t, url, q)
	if err := tr.Publish(ctx, transport.Message{RoutingKey: q, MessageID: "before"}); err != nil {
		t.Fatal(err)
	}

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseline := ms.HeapAlloc

	alarm := true
	ctl(t, "set_vm_memory_high_watermark", "0")
	defer func() {
		if alarm {
			ctl(t, "set_vm_memory_high_watermark", "0.4")
		}
	}()

	stop := make(chan struct{})
	var (
		wg                  sync.WaitGroup
		attempts, timeouts  atomic.Int64
		confirmedWhileAlarm atomic.Int64
		unexpected          atomic.Value
	)
	for g := range publishers {
		wg.Go(func() {
			body := make([]byte, bodySize)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				attempts.Add(1)
				pctx, pcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				err := tr.Publish(pctx, transport.Message{RoutingKey: q, MessageID: fmt.Sprintf("b%d-%d", g, i), Body: body})
				pcancel()
				switch {
				case err == nil:
					confirmedWhileAlarm.Add(1)
				case errors.Is(err, context.DeadlineExceeded):
					timeouts.Add(1)
				default:
					unexpected.CompareAndSwap(nil, err)
				}
			}
		})
	}

	// Watch until Health says blocked and a few seconds more, sampling
	// what the transport holds and the live heap.
	maxOutstanding, maxHeap := 0, uint64(0)
	blockedAt := time.Time{}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if n := tr.Outstanding(); n > maxOutstanding {
			maxOutstanding = n
		}
		if blockedAt.IsZero() {
			if h := tr.Health(context.Background()); h != nil && strings.Contains(h.Error(), "blocked") {
				blockedAt = time.Now()
			}
		} else if time.Since(blockedAt) > 3*time.Second {
			break
		}
		if !blockedAt.IsZero() {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			maxHeap = max(maxHeap, ms.HeapAlloc)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctl(t, "set_vm_memory_high_watermark", "0.4")
	alarm = false
	close(stop)
	wg.Wait()

	t.Logf("%d publishers, window %d: %d attempts, %d timed out, %d confirmed; at most %d outstanding; live heap at most %d KiB over the %d KiB baseline",
		publishers, window, attempts.Load(), timeouts.Load(), confirmedWhileAlarm.Load(), maxOutstanding, (int64(maxHeap)-int64(baseline))/1024, baseline/1024)
	if err, _ := unexpected.Load().(error); err != nil {
		t.Errorf("a publish failed with %v; want only deadline errors while blocked", err)
	}
	if blockedAt.IsZero() {
		t.Fatal("Health never said the connection was blocked")
	}
	if maxOutstanding > window {
		t.Errorf("%d publishes outstanding; the window is %d", maxOutstanding, window)
	}
	if timeouts.Load() < publishers {
		t.Errorf("only %d publishes timed out; want the publishers held back while blocked", timeouts.Load())
	}
	// Each publisher holds its own body (8 MiB here); the transport may
	// hold one copy per window slot, and the socket's write buffers a few
	// MiB more. Buffering every attempt would be over 100 MiB.
	limit := uint64(publishers+2*window)*bodySize + 8<<20
	if maxHeap > baseline+limit {
		t.Errorf("the live heap grew by %d KiB while blocked; want at most %d KiB", (maxHeap-baseline)/1024, limit/1024)
	}
}

package faulttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
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

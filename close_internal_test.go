package acemq

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// TestCloseEmptiesTheConnsLists (issue 41 item 2): after Close, nothing
// the Conn keeps names the consumers: not the engines of HealthReport, not
// the running ones the gauges read, not the per-queue locks of the
// blocked-key registries, not the metrics' attributes of their queues. A
// service that makes and closes a consumer per tenant leaves the Conn as
// it found it.
func TestCloseEmptiesTheConnsLists(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	settled := make(chan struct{}, 10)
	c, err := Connect(ctx, "memory://", WithLogger(slog.New(slog.DiscardHandler)),
		OnSettled(func(context.Context, Settlement) { settled <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	handle := func(context.Context, *Message[string]) Ack { return Done() }
	var closers []func() error
	var runs sync.WaitGroup
	for i, opts := range [][]ConsumerOption{
		nil,
		{Ordered(OrderPolicy{Partitions: 2, BlockOnFailure: true})},
	} {
		q := []string{"tenant-a", "tenant-b"}[i]
		cons, err := NewConsumer(c, q, handle, opts...)
		if err != nil {
			t.Fatal(err)
		}
		runs.Go(func() {
			if err := cons.Run(ctx); err != nil {
				t.Errorf("Run of %s: %v", q, err)
			}
		})
		closers = append(closers, cons.Close)
		ex, key := "", q
		if i == 1 {
			ex, key = q, ""
		}
		if err := NewPublisher[string](c, ex, key).Send(ctx, "hello", Key("k")); err != nil {
			t.Fatal(err)
		}
	}
	r := NewRouter(c, "tenant-c")
	Route(r, handle)
	runs.Go(func() {
		if err := r.Run(ctx); err != nil {
			t.Errorf("Run of the router: %v", err)
		}
	})
	closers = append(closers, r.Close)
	bad := NewRouter(c, "tenant-d", Concurrency(0))
	closers = append(closers, bad.Close)

	for range 2 {
		select {
		case <-settled:
		case <-ctx.Done():
			t.Fatal("the two messages did not settle")
		}
	}
	for len(c.runningEngines()) < 3 {
		if ctx.Err() != nil {
			t.Fatal("the three consumers did not run")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.metrics.mu.RLock()
	_, known := c.metrics.attrs["tenant-a"]
	c.metrics.mu.RUnlock()
	if !known {
		t.Fatal("no metrics' attributes for tenant-a before Close")
	}
	if _, err := BlockedKeys(ctx, c, "tenant-b"); err != nil { // takes the registry's lock once
		t.Fatal(err)
	}
	for _, close := range closers {
		if err := close(); err != nil {
			t.Fatal(err)
		}
	}
	runs.Wait()

	if n := len(c.registeredEngines()); n != 0 {
		t.Errorf("%d engines in HealthReport's list after Close", n)
	}
	if n := len(c.runningEngines()); n != 0 {
		t.Errorf("%d running engines after Close", n)
	}
	if paused, oldest := c.pausedByQueue(), c.oldestByQueue(); len(paused)+len(oldest) != 0 {
		t.Errorf("the gauges still observe %v and %v", paused, oldest)
	}
	c.registryOps.Range(func(k, _ any) bool {
		t.Errorf("the registry lock of %v is still kept", k)
		return true
	})
	c.metrics.mu.RLock()
	for _, q := range []string{"tenant-a", "tenant-b", "tenant-c"} {
		if _, ok := c.metrics.attrs[q]; ok {
			t.Errorf("the metrics' attributes of %s are still kept", q)
		}
	}
	c.metrics.mu.RUnlock()
	if err := c.Health(ctx); err != nil {
		t.Errorf("Health after every consumer was closed: %v", err)
	}
}

// TestInFlightOldest: the tracker reports the oldest call that runs, and
// nothing once every call ended; its slots are reused.
func TestInFlightOldest(t *testing.T) {
	t.Parallel()
	var f inFlight
	if age, id, _ := f.oldest(100); age != 0 || id != "" {
		t.Fatalf("empty: %v %q", age, id)
	}
	a := f.begin(10, "a")
	b := f.begin(5, "b")
	c := f.begin(20, "c")
	if age, id, began := f.oldest(100); age != 95 || id != "b" || !began.Equal(epoch.Add(5)) {
		t.Errorf("oldest: %v %q %v, want 95ns b", age, id, began)
	}
	f.end(b)
	if age, id, _ := f.oldest(100); age != 90 || id != "a" {
		t.Errorf("after b ended: %v %q, want 90ns a", age, id)
	}
	d := f.begin(30, "d")
	if d != b {
		t.Errorf("slot %d, want %d again", d, b)
	}
	for _, s := range []int{a, c, d} {
		f.end(s)
	}
	if age, id, _ := f.oldest(100); age != 0 || id != "" {
		t.Errorf("all ended: %v %q", age, id)
	}
	if len(f.slots) != 3 {
		t.Errorf("%d slots for at most 3 calls at once", len(f.slots))
	}
}

// BenchmarkInFlight is what the tracker costs a delivery: a begin and an
// end, from 8 workers at once.
func BenchmarkInFlight(b *testing.B) {
	var f inFlight
	b.ReportAllocs()
	b.SetParallelism(4) // 8 goroutines on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			f.end(f.begin(1, "id"))
		}
	})
}

// BenchmarkInFlightOneWorker is BenchmarkInFlight from one goroutine: the
// cost when workers do not meet in the tracker, as they mostly do not
// (each spends microseconds elsewhere per delivery).
func BenchmarkInFlightOneWorker(b *testing.B) {
	var f inFlight
	b.ReportAllocs()
	for b.Loop() {
		f.end(f.begin(1, "id"))
	}
}

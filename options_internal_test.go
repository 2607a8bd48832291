package acemq

import (
	"context"
	"testing"
	"time"
)

// TestDefaultPrefetchStaysInSixteenBits: the default prefetch grows with
// Concurrency (and, for a batch consumer, with BatchSize) but never past
// the 65535 basic.qos carries, where RabbitMQ would refuse the consumer at
// Run while memory:// took it.
func TestDefaultPrefetchStaysInSixteenBits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, "memory://"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	for _, tc := range []struct {
		name string
		opts []ConsumerOption
		want int
	}{
		{"default", nil, 64},
		{"concurrency 100", []ConsumerOption{Concurrency(100)}, 200},
		{"concurrency 40000", []ConsumerOption{Concurrency(40000)}, 65535},
		{"batches of 1000 on 40 workers", []ConsumerOption{batching(), Concurrency(40), plainOptionFunc(BatchSize(1000).applyBatchConsumer), batchChecked()}, 65535},
		{"given", []ConsumerOption{Concurrency(40000), Prefetch(10)}, 10},
	} {
		e, err := newEngine(c, "q-"+tc.name, "consumer", append(tc.opts, NoDeclare()), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if e.cfg.prefetch != tc.want {
			t.Errorf("%s: prefetch %d, want %d", tc.name, e.cfg.prefetch, tc.want)
		}
	}
}

package acemq_test

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

// BenchmarkDelayedSendAll compares, on RabbitMQ in one run, SendAll of
// batches of 1,000 messages sent at once to a classic and to a quorum
// queue with the same batches sent After(1s) (into the delay topology's
// quorum queues); ns/msg is per message, and the ratio of delayed to plain
// is what SPEC §20's target (>= 0.9x of plain) reads. Each sub-benchmark
// waits for its delayed messages to be forwarded before deleting its
// queue, so none ends in acemq.delay.unroutable.
func BenchmarkDelayedSendAll(b *testing.B) {
	url := acemqtest.RabbitMQ(b)
	for _, tc := range []struct {
		name   string
		quorum bool
		opts   []acemq.SendOption
	}{
		{name: "plain/classic"},
		{name: "plain/quorum", quorum: true},
		{name: "delayed", opts: []acemq.SendOption{acemq.After(time.Second)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			c, err := acemq.Connect(ctx, url, acemq.WithLogger(quiet))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			q := acemqtest.QueueName(b, "bench")
			if err := c.Declare(ctx, acemq.Queue{Name: q, Quorum: tc.quorum}); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = c.Transport().DeleteQueue(ctx, q) }()
			pub := acemq.NewPublisher[benchPayload](c, "", q)
			if tc.opts != nil { // declare the topology outside the timing
				if err := pub.Send(ctx, newBenchPayload(), tc.opts...); err != nil {
					b.Fatal(err)
				}
			}
			batch := make([]benchPayload, 1000)
			for i := range batch {
				batch[i] = newBenchPayload()
			}
			sent := 0
			for b.Loop() {
				for _, r := range pub.SendAll(ctx, batch, tc.opts...) {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
				sent += len(batch)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(sent), "ns/msg")
			b.StopTimer()
			if tc.opts != nil {
				want := sent + 1
				deadline := time.Now().Add(2 * time.Minute)
				for time.Now().Before(deadline) {
					info, err := c.Transport().Inspect(ctx, q)
					if err == nil && info.Messages >= want {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
}

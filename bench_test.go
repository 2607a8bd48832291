package acemq_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
)

// benchPayload is a 256-byte JSON message once encoded.
type benchPayload struct {
	OrderID string `json:"orderId"`
	Note    string `json:"note"`
}

func newBenchPayload() benchPayload {
	p := benchPayload{OrderID: "A-0000001"}
	p.Note = strings.Repeat("x", 256-len(`{"orderId":"A-0000001","note":""}`))
	return p
}

// chainOf returns n publish and n consume interceptors that do what real
// ones do: look at a header and set one.
func chainOf(n int) []acemq.ConnOption {
	var opts []acemq.ConnOption
	for i := range n {
		name := fmt.Sprintf("x-stamp-%d", i)
		opts = append(opts,
			acemq.WithPublishInterceptor(func(_ context.Context, c *acemq.PublishContext) error {
				c.SetHeader(name, "v")
				return nil
			}),
			acemq.WithConsumeInterceptor(func(_ context.Context, c *acemq.ConsumeContext) error {
				if c.Envelope.Headers[name] != "v" {
					return fmt.Errorf("missing %s", name)
				}
				return nil
			}))
	}
	return opts
}

func benchConn(b *testing.B, interceptors int) (*acemq.Conn, string) {
	b.Helper()
	opts := append(chainOf(interceptors), acemq.WithLogger(quiet))
	c, err := acemq.Connect(context.Background(), "memory://", opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	q := "bench"
	if err := c.Declare(context.Background(), acemq.Queue{Name: q}); err != nil {
		b.Fatal(err)
	}
	return c, q
}

// BenchmarkSend is one confirmed Send on the memory transport: the engine's
// own cost per publish.
func BenchmarkSend(b *testing.B) {
	for _, n := range []int{0, 3} {
		b.Run(fmt.Sprintf("interceptors=%d", n), func(b *testing.B) {
			c, q := benchConn(b, n)
			pub := acemq.NewPublisher[benchPayload](c, "", q)
			v := newBenchPayload()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := pub.Send(ctx, v); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			_ = c.Transport().DeleteQueue(ctx, q)
		})
	}
}

// BenchmarkSendAll sends batches of 1,000; ns/op is per message.
func BenchmarkSendAll(b *testing.B) {
	for _, n := range []int{0, 3} {
		b.Run(fmt.Sprintf("interceptors=%d", n), func(b *testing.B) {
			c, q := benchConn(b, n)
			pub := acemq.NewPublisher[benchPayload](c, "", q)
			batch := make([]benchPayload, 1000)
			for i := range batch {
				batch[i] = newBenchPayload()
			}
			ctx := context.Background()
			b.ReportAllocs()
			sent := 0
			for b.Loop() {
				for _, r := range pub.SendAll(ctx, batch) {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
				sent += len(batch)
				_ = c.Transport().DeleteQueue(ctx, q)
				_ = c.Declare(ctx, acemq.Queue{Name: q})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(sent), "ns/msg")
		})
	}
}

// BenchmarkConsume is one delivery through parse, the consume chain, the
// JSON decode, the handler and the ack, with messages published beforehand.
func BenchmarkConsume(b *testing.B) {
	for _, n := range []int{0, 3} {
		b.Run(fmt.Sprintf("interceptors=%d", n), func(b *testing.B) {
			c, q := benchConn(b, n)
			ctx := context.Background()
			pub := acemq.NewPublisher[benchPayload](c, "", q)
			batch := make([]benchPayload, b.N)
			for i := range batch {
				batch[i] = newBenchPayload()
			}
			for _, r := range pub.SendAll(ctx, batch) {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			done := make(chan struct{})
			var handled int
			cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[benchPayload]) acemq.Ack {
				handled++
				if handled == b.N {
					close(done)
				}
				return acemq.Done()
			}, acemq.Prefetch(500))
			if err != nil {
				b.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			runErr := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			go func() { runErr <- cons.Run(runCtx) }()
			<-done
			b.StopTimer()
			stop()
			if err := <-runErr; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkBatchConsume is BenchmarkConsume through a batch consumer with
// the default BatchSize (100) and a handler that does nothing; ns/op is per
// message, for comparison with BenchmarkConsume's.
func BenchmarkBatchConsume(b *testing.B) {
	for _, n := range []int{0, 3} {
		b.Run(fmt.Sprintf("interceptors=%d", n), func(b *testing.B) {
			c, q := benchConn(b, n)
			ctx := context.Background()
			pub := acemq.NewPublisher[benchPayload](c, "", q)
			batch := make([]benchPayload, b.N)
			for i := range batch {
				batch[i] = newBenchPayload()
			}
			for _, r := range pub.SendAll(ctx, batch) {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			done := make(chan struct{})
			var handled int
			cons, err := acemq.NewBatchConsumer(c, q, func(_ context.Context, ms []*acemq.Message[benchPayload]) []acemq.Ack {
				handled += len(ms)
				if handled == b.N {
					close(done)
				}
				return nil
			}, acemq.BatchWait(time.Millisecond))
			if err != nil {
				b.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			runErr := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			go func() { runErr <- cons.Run(runCtx) }()
			<-done
			b.StopTimer()
			stop()
			if err := <-runErr; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkOrderedConsume is BenchmarkConsume through an ordered consumer:
// 16 partitions, Concurrency 8, 1,000 keys, the messages published to its
// exchange beforehand. The spreader's first tick (the instance taking its
// slot) is inside the timing; a large b.N spreads it thin.
func BenchmarkOrderedConsume(b *testing.B) {
	c, q := benchConn(b, 0)
	ctx := context.Background()
	done := make(chan struct{})
	var handled atomic.Int64
	n := int64(b.N)
	cons, err := acemq.NewConsumer(c, q+".ordered", func(_ context.Context, m *acemq.Message[benchPayload]) acemq.Ack {
		if handled.Add(1) == n {
			close(done)
		}
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 16}), acemq.Concurrency(8), acemq.Prefetch(500))
	if err != nil {
		b.Fatal(err)
	}
	pub := acemq.NewPublisher[benchPayload](c, q+".ordered", "",
		acemq.KeyBy(func(p benchPayload) string { return p.OrderID }))
	batch := make([]benchPayload, b.N)
	for i := range batch {
		batch[i] = newBenchPayload()
		batch[i].OrderID = fmt.Sprintf("A-%07d", i%1000)
	}
	for _, r := range pub.SendAll(ctx, batch) {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() { runErr <- cons.Run(runCtx) }()
	<-done
	b.StopTimer()
	stop()
	if err := <-runErr; err != nil {
		b.Fatal(err)
	}
}

package rabbitmq_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// benchQueue declares a fresh queue on the shared broker for one benchmark.
func benchQueue(b *testing.B, tr transport.Transport) string {
	b.Helper()
	name := acemqtest.QueueName(b, "bench")
	if err := tr.Declare(context.Background(), transport.Queue{Name: name}); err != nil {
		b.Fatal(err)
	}
	acemqtest.DeleteQueuesAfter(b, brokerURL(b), name)
	return name
}

var benchChannels = 2

func reportRate(b *testing.B, start time.Time) {
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
}

// BenchmarkPublishPipelined measures confirmed publishes of 256-byte
// bodies through the transport, from 64 goroutines and from one, beside raw
// amqp091-go on one channel with 1024 confirms in flight and with one.
func BenchmarkPublishPipelined(b *testing.B) {
	url := brokerURL(b)
	body := make([]byte, 256)

	b.Run("acemq/64goroutines", func(b *testing.B) {
		tr := dial(b, url, rabbitmq.Config{Channels: benchChannels})
		q := benchQueue(b, tr)
		var next atomic.Int64
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(b.N) {
					if err := tr.Publish(ctx, transport.Message{RoutingKey: q, Body: body}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		reportRate(b, start)
	})

	b.Run("acemq/sequential", func(b *testing.B) {
		tr := dial(b, url, rabbitmq.Config{})
		q := benchQueue(b, tr)
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			if err := tr.Publish(ctx, transport.Message{RoutingKey: q, Body: body}); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, start)
	})

	b.Run("raw/window1024", func(b *testing.B) { rawPublish(b, url, body, 1024) })
	b.Run("raw/sequential", func(b *testing.B) { rawPublish(b, url, body, 1) })
}

// rawPublish publishes b.N messages with amqp091-go alone, one goroutine
// keeping up to window confirms in flight: the baseline.
func rawPublish(b *testing.B, url string, body []byte, window int) {
	tr := dial(b, url, rabbitmq.Config{})
	q := benchQueue(b, tr)
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window+1))
	slots := make(chan struct{}, window)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for got := 0; got < b.N; got++ {
			c := <-confirms
			if !c.Ack {
				b.Error("nack")
			}
			<-slots
		}
	}()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		slots <- struct{}{}
		err := ch.PublishWithContext(context.Background(), "", q, true, false,
			amqp.Publishing{Body: body, DeliveryMode: amqp.Persistent})
		if err != nil {
			b.Fatal(err)
		}
	}
	<-done
	reportRate(b, start)
}

// BenchmarkPublishBatchKeys measures PublishBatch of 256-byte bodies in
// batches of 1,024, with no ordering key, with keys spread over 1,000
// values and with one key for every message (header x-acemq-key, what an
// ordered consumer's publishers send), beside raw amqp091-go with 1,024
// confirms in flight. The same 1,000 values in another header
// (acemq/header1000) cost the wire and the broker what the keys do without
// the transport's per-key order: the difference to keys1000 is its cost.
func BenchmarkPublishBatchKeys(b *testing.B) {
	url := brokerURL(b)
	body := make([]byte, 256)
	for _, c := range []struct {
		name   string
		keys   int
		header string
	}{{"acemq/nokey", 0, ""}, {"acemq/header1000", 1000, "x-acemq-kez"}, {"acemq/keys1000", 1000, "x-acemq-key"}, {"acemq/keys1", 1, "x-acemq-key"}} {
		b.Run(c.name, func(b *testing.B) {
			tr := dial(b, url, rabbitmq.Config{})
			q := benchQueue(b, tr)
			ctx := context.Background()
			const batch = 1024
			ms := make([]transport.Message, batch)
			for i := range ms {
				ms[i] = transport.Message{RoutingKey: q, Body: body}
				if c.keys > 0 {
					ms[i].Headers = map[string]any{c.header: fmt.Sprintf("key-%d", i%c.keys)}
				}
			}
			b.ResetTimer()
			start := time.Now()
			for left := b.N; left > 0; left -= batch {
				for _, err := range tr.PublishBatch(ctx, ms[:min(batch, left)]) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			reportRate(b, start)
		})
	}
	b.Run("raw/window1024", func(b *testing.B) { rawPublish(b, url, body, 1024) })
}

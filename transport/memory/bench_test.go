package memory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
)

// benchMessage is shaped like what the engine publishes: a 256-byte body and
// a handful of envelope headers.
func benchMessage(queue string) transport.Message {
	return transport.Message{
		RoutingKey: queue,
		Headers: map[string]any{
			"x-acemq-id":         "0190d6c0-7f4e-7a9b-8c1d-2e3f4a5b6c7d",
			"x-acemq-type":       "OrderPlaced",
			"x-acemq-version":    int64(1),
			"x-acemq-attempt":    int64(1),
			"x-acemq-first-seen": "2024-07-01T12:00:00.123456789Z",
			"x-acemq-origin":     "bench@localhost",
		},
		ContentType: "application/json",
		MessageID:   "0190d6c0-7f4e-7a9b-8c1d-2e3f4a5b6c7d",
		Type:        "OrderPlaced",
		Timestamp:   time.Now(),
		Body:        make([]byte, 256),
	}
}

// BenchmarkPublishConsume measures one message published, confirmed,
// delivered to a consumer (prefetch 500) and acked.
func BenchmarkPublishConsume(b *testing.B) {
	for _, bc := range []struct {
		name       string
		publishers int
	}{
		{"publishers=1", 1},
		{"publishers=8", 8},
	} {
		b.Run(bc.name, func(b *testing.B) {
			benchPublishConsume(b, bc.publishers)
		})
	}
}

func benchPublishConsume(b *testing.B, publishers int) {
	broker := memory.NewBroker()
	tr := broker.Connect()
	defer tr.Close()
	ctx := context.Background()
	if err := tr.Declare(ctx, transport.Queue{Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	consumed := make(chan struct{})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	want := b.N
	var wg sync.WaitGroup
	wg.Go(func() {
		n := 0
		err := tr.Consume(cctx, "bench", 500, func(d transport.Delivery) {
			if err := d.Ack(); err != nil {
				b.Error(err)
			}
			if n++; n == want {
				close(consumed)
			}
		})
		if err != nil {
			b.Error(err)
		}
	})
	m := benchMessage("bench")
	b.SetBytes(int64(len(m.Body)))
	b.ReportAllocs()
	b.ResetTimer()
	var pub sync.WaitGroup
	for p := range publishers {
		pub.Go(func() {
			for i := p; i < want; i += publishers {
				if err := tr.Publish(ctx, m); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	pub.Wait()
	if want > 0 {
		<-consumed
	}
	b.StopTimer()
	cancel()
	wg.Wait()
}

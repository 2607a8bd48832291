package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/acemqtest/netproxy"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// fenceName is a counter unique to t, deleted when it ends.
func fenceName(t *testing.T, url string) string {
	t.Helper()
	name := acemqtest.QueueName(t, "fence")
	acemqtest.DeleteQueuesAfter(t, url, name)
	return name
}

func mustFence(t testing.TB, f transport.Fencer, name string) uint64 {
	t.Helper()
	v, err := f.Fence(ctxT(t), name)
	if err != nil {
		t.Fatalf("Fence(%q): %v", name, err)
	}
	return v
}

// A transport that lost its connection and made another goes on above
// what it returned before, and a counter declared as a stream is what the
// broker shows.
func TestFenceAcrossAReconnect(t *testing.T) {
	url := brokerURL(t)
	name := fenceName(t, url)
	p, err := netproxy.New(hostOf(t, url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var logs syncBuffer
	tr := dial(t, withHost(t, url, p.Addr()), rabbitmq.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	before := mustFence(t, tr, name)
	p.Cut()
	eventually(t, 10*time.Second, "the transport reconnects after the cut", func() bool {
		return strings.Contains(logs.String(), "acemq: rabbitmq reconnected")
	})
	after := mustFence(t, tr, name) // on a fencing connection dialled again too
	if after <= before {
		t.Fatalf("Fence after a reconnect = %d; want above %d", after, before)
	}
}

// A client that dies in the middle of a Fence leaves what it did on the
// broker: a subscription at the end of the stream and a published mark it
// never read. The next Fence, on another connection, is above the offset
// of that mark as well as above every value returned.
func TestFenceAfterAClientDiedMidway(t *testing.T) {
	url := brokerURL(t)
	name := fenceName(t, url)
	tr := dial(t, url, rabbitmq.Config{})
	first := mustFence(t, tr, name)

	// The dying client: what Fence does up to the read, by hand, then the
	// connection dropped without a close.
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("amqp.Dial: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(8, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	marks, err := ch.Consume(name, "", false, false, false, false, amqp.Table{"x-stream-offset": "next"})
	if err != nil {
		t.Fatalf("Consume of the counter's stream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", name, false, false, amqp.Publishing{MessageId: "orphan", DeliveryMode: amqp.Persistent})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("confirm of orphan mark %d: %v, %v", i, ok, err)
		}
	}
	var orphan int64
	select {
	case d := <-marks:
		orphan, _ = d.Headers["x-stream-offset"].(int64)
	case <-ctx.Done():
		t.Fatal("the orphan mark never arrived")
	}
	_ = conn.Close()

	next := mustFence(t, tr, name)
	if next <= first || next <= uint64(orphan)+1 {
		t.Fatalf("Fence after a client died midway = %d; want above %d (returned) and %d (the orphan's offset + 1)", next, first, orphan+1)
	}
	other := dial(t, url, rabbitmq.Config{})
	if v := mustFence(t, other, name); v <= next {
		t.Fatalf("Fence on another connection = %d; want above %d", v, next)
	}
}

// A cancelled ctx ends Fence with ctx's error and no value.
func TestFenceEndedContext(t *testing.T) {
	url := brokerURL(t)
	name := fenceName(t, url)
	tr := dial(t, url, rabbitmq.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	v, err := tr.Fence(ctx, name)
	if !errors.Is(err, context.Canceled) || v != 0 {
		t.Fatalf("Fence with an ended ctx = %d, %v; want 0 and context.Canceled", v, err)
	}
}

// BenchmarkFence measures one Fence on an existing counter; it reports
// the median call as median-ms besides the mean.
func BenchmarkFence(b *testing.B) {
	url := brokerURL(b)
	name := acemqtest.QueueName(b, "fence")
	acemqtest.DeleteQueuesAfter(b, url, name)
	tr := dial(b, url, rabbitmq.Config{})
	mustFence(b, tr, name)
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := tr.Fence(context.Background(), name); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/float64(time.Millisecond), "median-ms")
}

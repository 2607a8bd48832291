package clustertest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/tools/cluster"
	amqp "github.com/rabbitmq/amqp091-go"
)

// bigFrames is a node of its own whose frame_max (16 MiB) is far above the
// client's former 128 KiB: a producer may send it headers no default
// broker takes.
var bigFrames = cluster.Config{Name: "acemq-f", BasePort: 5821, Nodes: 1, Conf: []string{"frame_max = 16777216"}}

// TestOversizedHeadersAreParked (issue 37 item 9): on a broker configured
// with a frame_max of 16 MiB, a message with one 10 MB header and one with
// 100 headers of 100 KB each used to kill the consumer's connection on
// every delivery (501 "frame size exceeds negotiated frame_max"), 113
// reconnects in 12.7 s, never parked. Now the Conn takes the broker's
// frame size, both messages are parked with a reason naming MaxHeaderSize,
// the message after them is handled, and the connection never drops.
func TestOversizedHeadersAreParked(t *testing.T) {
	if !asked || testing.Short() {
		t.Skipf("a RabbitMQ node of its own: %v", startErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := bigFrames
	cfg.Logf = t.Logf
	node, err := cluster.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("starting a node with frame_max 16 MiB: %v", err)
	}
	t.Cleanup(func() {
		if err := node.Remove(); err != nil {
			t.Errorf("removing the node: %v", err)
		}
	})
	url := node.Nodes[0].URL()

	logs := &syncBuffer{}
	settled := make(chan acemq.Settlement, 16)
	c, err := acemq.Connect(ctx, url,
		acemq.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	q := acemqtest.QueueName(t, "frames")
	handled := make(chan string, 4)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		handled <- m.Envelope.ID
		return acemq.Done()
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		<-done
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		if err := c.Delete(dctx, cons.Topology()...); err != nil {
			t.Errorf("deleting %s: %v", q, err)
		}
	})
	waitReady(t, c, q)

	// A foreign producer, amqp091-go at the broker's frame size.
	raw, err := amqp.DialConfig(url, amqp.Config{FrameSize: amqp.FrameSizeUnlimited})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ch, err := raw.Channel()
	if err != nil {
		t.Fatal(err)
	}
	many := amqp.Table{}
	for i := range 100 {
		many["x-big-"+string(rune('a'+i/26))+string(rune('a'+i%26))] = strings.Repeat("m", 100_000)
	}
	for _, m := range []struct {
		id      string
		headers amqp.Table
	}{
		{"one-10mb-header", amqp.Table{"x-huge": strings.Repeat("h", 10_000_000)}},
		{"100-headers-of-100kb", many},
		{"plain", nil},
	} {
		if err := ch.PublishWithContext(ctx, "", q, true, false, amqp.Publishing{
			MessageId: m.id, Type: "Step", ContentType: "application/json", Headers: m.headers, Body: []byte(`{"key":"k","n":1}`),
		}); err != nil {
			t.Fatalf("publishing %s: %v", m.id, err)
		}
	}

	parked := map[string]string{}
	for len(parked) < 2 {
		select {
		case s := <-settled:
			if s.Outcome != acemq.OutcomeParked {
				t.Fatalf("%s settled %s (%s), want parked", s.Envelope.ID, s.Outcome, s.Reason)
			}
			parked[s.Envelope.ID] = s.Reason
		case <-ctx.Done():
			t.Fatalf("parked %v; the logs:\n%s", parked, logs.String())
		}
	}
	for id, reason := range parked {
		if !strings.Contains(reason, "over the limit of 131072 (MaxHeaderSize)") {
			t.Errorf("%s parked for %q, want the header limit named", id, reason)
		}
	}
	select {
	case id := <-handled:
		if id != "plain" {
			t.Errorf("handled %s, want only the plain message", id)
		}
	case <-ctx.Done():
		t.Fatal("the plain message after them was never handled")
	}
	pq, err := ch.QueueDeclarePassive(q+".parked", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pq.Messages != 2 {
		t.Errorf("%s.parked holds %d messages, want both oversized ones", q, pq.Messages)
	}
	if n := strings.Count(logs.String(), "rabbitmq connected"); n != 1 {
		t.Errorf("the consumer's Conn connected %d times, want once (it never dropped):\n%s", n, logs.String())
	}
}

// waitReady waits until c reports healthy: its consumer of q runs, its
// queues declared.
func waitReady(t *testing.T, c *acemq.Conn, q string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.Health(ctxT(t, 10*time.Second))
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer of %s never became healthy: %v", q, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

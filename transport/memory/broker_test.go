package memory_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
)

// client connects to b and closes the client when the test ends.
func client(t *testing.T, b *memory.Broker) *memory.Transport {
	t.Helper()
	tr := b.Connect()
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErr fails t unless err wraps target and mentions every one of names.
func wantErr(t *testing.T, err, target error, names ...string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v; want %v", err, target)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not name %q", err, n)
		}
	}
	if !strings.HasPrefix(err.Error(), "memory: ") {
		t.Errorf("error %q lacks the memory: prefix", err)
	}
}

func get(t *testing.T, tr transport.Transport, queue string) (transport.Delivery, bool) {
	t.Helper()
	d, ok, err := tr.Get(context.Background(), queue)
	must(t, err)
	return d, ok
}

func TestSharedBrokers(t *testing.T) {
	t.Parallel()
	name := "shared-" + t.Name()
	//lint:ignore SA4000 two calls with one name, which must return one broker
	if memory.Shared(name) != memory.Shared(name) {
		t.Error("Shared returned two brokers for one name")
	}
	//lint:ignore SA4000 two calls with "", which must return two brokers
	if memory.Shared("") == memory.Shared("") {
		t.Error("Shared(\"\") returned the same broker twice")
	}
	a, b := memory.New(name), memory.New(name)
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	must(t, a.Declare(ctx, transport.Queue{Name: "q"}))
	must(t, a.Publish(ctx, transport.Message{RoutingKey: "q", Body: []byte("hi")}))
	must(t, a.Close())
	d, ok := get(t, b, "q")
	if !ok || string(d.Body) != "hi" {
		t.Fatalf("the other client got %v %q; want the message", ok, d.Body)
	}
	must(t, d.Ack())
	must(t, b.Health(ctx))
}

func TestErrorsNameWhatFailed(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := client(t, b)
	ctx := context.Background()
	must(t, tr.Declare(ctx, transport.Queue{Name: "orders", Args: map[string]any{"x-message-ttl": 5000}}))
	must(t, tr.Declare(ctx, transport.Queue{Name: "orders", Args: map[string]any{"x-message-ttl": int64(5000)}}))
	wantErr(t, tr.Declare(ctx, transport.Queue{Name: "orders", Args: map[string]any{"x-message-ttl": 200}}),
		transport.ErrTopologyConflict, `"orders"`, "x-message-ttl")
	wantErr(t, tr.Declare(ctx, transport.Queue{Name: "orders", Quorum: true, Args: map[string]any{"x-message-ttl": 5000}}),
		transport.ErrTopologyConflict, `"orders"`, "exists as a classic queue")
	wantErr(t, tr.Declare(ctx, transport.Exchange{Name: "amq.topic", Kind: "direct"}),
		transport.ErrTopologyConflict, "amq.topic")
	wantErr(t, tr.Declare(ctx, transport.Binding{Exchange: "nope", Queue: "orders"}), transport.ErrNotFound, `"nope"`)
	wantErr(t, tr.Declare(ctx, transport.Binding{Exchange: "amq.direct", Queue: "nope"}), transport.ErrNotFound, `"nope"`)
	wantErr(t, tr.Publish(ctx, transport.Message{Exchange: "nope"}), transport.ErrNotFound, `"nope"`)
	wantErr(t, tr.Publish(ctx, transport.Message{Exchange: "amq.direct", RoutingKey: "k1"}),
		transport.ErrUnroutable, "amq.direct", "k1")
	wantErr(t, tr.Publish(ctx, transport.Message{RoutingKey: "missing"}), transport.ErrUnroutable, "default exchange", "missing")
	_, err := tr.Inspect(ctx, "nope")
	wantErr(t, err, transport.ErrNotFound, `"nope"`)

	for _, tc := range []struct {
		name string
		top  transport.Topology
	}{
		{"bad ttl", transport.Queue{Name: "q", Args: map[string]any{"x-message-ttl": "soon"}}},
		{"negative ttl", transport.Queue{Name: "q", Args: map[string]any{"x-message-ttl": -1}}},
		{"routing key without exchange", transport.Queue{Name: "q", Args: map[string]any{"x-dead-letter-routing-key": "k"}}},
		{"bad queue type", transport.Queue{Name: "q", Args: map[string]any{"x-queue-type": "stream"}}},
		{"quorum declared classic", transport.Queue{Name: "q", Quorum: true, Args: map[string]any{"x-queue-type": "classic"}}},
		{"transient quorum", transport.Queue{Name: "q", Quorum: true, Transient: true}},
		{"no name", transport.Queue{}},
		{"reserved queue", transport.Queue{Name: "amq.mine"}},
		{"reserved exchange", transport.Exchange{Name: "amq.mine"}},
		{"default exchange", transport.Exchange{Name: ""}},
		{"unknown kind", transport.Exchange{Name: "x", Kind: "random"}},
		{"bind default exchange", transport.Binding{Queue: "orders"}},
		{"nil pointer", (*transport.Queue)(nil)},
	} {
		err := tr.Declare(ctx, tc.top)
		if err == nil || !strings.HasPrefix(err.Error(), "memory: ") {
			t.Errorf("%s: Declare = %v; want a memory: error", tc.name, err)
		}
	}
	must(t, tr.Declare(ctx, &transport.Exchange{Name: "amq.topic", Kind: "topic"}))
}

func TestSettlementErrors(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := client(t, b)
	ctx := context.Background()
	must(t, tr.Declare(ctx, transport.Queue{Name: "q"}))
	must(t, tr.Publish(ctx, transport.Message{RoutingKey: "q"}))
	d, _ := get(t, tr, "q")
	must(t, d.Ack())
	if err := d.Ack(); err == nil {
		t.Error("a second Ack succeeded")
	}
	if err := d.Nack(true); err == nil {
		t.Error("a Nack after the Ack succeeded")
	}
	d.Tag = 999
	if err := d.Ack(); err == nil {
		t.Error("an Ack of an unknown tag succeeded")
	}
	if err := (transport.Delivery{}).Ack(); err == nil {
		t.Error("an Ack with no acknowledger succeeded")
	}
	must(t, tr.Close())
	if err := d.Nack(false); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Nack after Close = %v; want ErrClosed", err)
	}
}

func TestTagsCountUpPerClient(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	a, c := client(t, b), client(t, b)
	ctx := context.Background()
	must(t, a.Declare(ctx, transport.Queue{Name: "q"}))
	for range 4 {
		must(t, a.Publish(ctx, transport.Message{RoutingKey: "q"}))
	}
	var tags []uint64
	for _, tr := range []transport.Transport{a, a, c, a} {
		d, _ := get(t, tr, "q")
		tags = append(tags, d.Tag)
		must(t, d.Ack())
	}
	if want := []uint64{1, 2, 1, 3}; !equal(tags, want) {
		t.Errorf("tags = %v; want %v", tags, want)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReplyToGoneRequesterIsUnroutable(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	requester, responder := client(t, b), client(t, b)
	ctx := context.Background()
	must(t, responder.Declare(ctx, transport.Queue{Name: "rpc"}))
	rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := requester.Request(rctx, transport.Message{RoutingKey: "rpc", MessageID: "1"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Request = %v; want DeadlineExceeded", err)
	}
	d, _ := get(t, responder, "rpc")
	must(t, d.Ack())
	err := responder.Publish(ctx, transport.Message{RoutingKey: d.ReplyTo, CorrelationID: "1"})
	wantErr(t, err, transport.ErrUnroutable, d.ReplyTo)
	wantErr(t, responder.Publish(ctx, transport.Message{RoutingKey: transport.DirectReplyTo + ".made-up"}), transport.ErrUnroutable)
}

func TestRequestFailsWhenClientCloses(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := client(t, b)
	ctx := context.Background()
	must(t, tr.Declare(ctx, transport.Queue{Name: "rpc"}))
	errc := make(chan error, 1)
	go func() {
		_, err := tr.Request(ctx, transport.Message{RoutingKey: "rpc", MessageID: "1"})
		errc <- err
	}()
	waitFor(t, "the request to arrive", func() bool { return inspect(t, b, "rpc").Messages == 1 })
	must(t, tr.Close())
	if err := <-errc; !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Request during Close = %v; want ErrClosed", err)
	}
}

// inspect reports a queue through a short-lived client of b.
func inspect(t *testing.T, b *memory.Broker, queue string) transport.QueueInfo {
	t.Helper()
	tr := b.Connect()
	defer tr.Close()
	info, err := tr.Inspect(context.Background(), queue)
	must(t, err)
	return info
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

package memory_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
)

// TestHandOverClientCloses: a client closing while its hand-over consumer
// holds released and unsettled deliveries puts them all back in queue order.
func TestHandOverClientCloses(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	admin, holder := client(t, b), b.Connect()
	ctx := context.Background()
	must(t, admin.Declare(ctx, transport.Queue{Name: "q", Args: map[string]any{"x-single-active-consumer": true}}))
	for i := range 6 {
		must(t, admin.Publish(ctx, transport.Message{RoutingKey: "q", MessageID: fmt.Sprint(i)}))
	}
	got := make(chan transport.Delivery, 6)
	done := make(chan error, 1)
	go func() {
		done <- holder.ConsumeHandOver(ctx, "q", 4, func(d transport.Delivery) { got <- d })
	}()
	var ds []transport.Delivery
	for range 4 {
		ds = append(ds, <-got)
	}
	must(t, ds[0].Ack())
	must(t, ds[2].Release())
	must(t, ds[1].Release())
	must(t, holder.Close())
	if err := <-done; err == nil {
		t.Error("ConsumeHandOver returned nil after its client closed; want an error")
	}
	var ids []string
	for {
		d, ok := get(t, admin, "q")
		if !ok {
			break
		}
		ids = append(ids, d.MessageID)
		must(t, d.Ack())
	}
	if want := []string{"1", "2", "3", "4", "5"}; !slices.Equal(ids, want) {
		t.Errorf("after the client closed the queue holds %q; want %q", ids, want)
	}
}

// TestLeaseAndQueueNames: a lease and a queue cannot share a name.
func TestLeaseAndQueueNames(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := client(t, b)
	ctx := context.Background()
	must(t, tr.Declare(ctx, transport.Queue{Name: "q"}))
	_, err := tr.Lease(ctx, "q")
	wantErr(t, err, transport.ErrLocked, `"q"`)
	l, err := tr.Lease(ctx, "lock")
	must(t, err)
	wantErr(t, tr.Declare(ctx, transport.Queue{Name: "lock"}), transport.ErrLocked, `"lock"`)
	must(t, l.Release(ctx))
	must(t, tr.Declare(ctx, transport.Queue{Name: "lock"}))
	if _, err := tr.Lease(ctx, ""); err == nil {
		t.Error("a lease without a name was taken")
	}
	must(t, tr.Close())
	_, err = tr.Lease(ctx, "other")
	wantErr(t, err, transport.ErrClosed)
	select {
	case <-l.Lost():
		t.Error("Lost closed for a lease released before Close")
	case <-time.After(10 * time.Millisecond):
	}
}

// TestConsistentHashMemory: what memory decides where RabbitMQ's plugin
// leaves it open (a missing header goes to the first bound queue), and the
// arguments it refuses.
func TestConsistentHashMemory(t *testing.T) {
	t.Parallel()
	b := memory.NewBroker()
	tr := client(t, b)
	ctx := context.Background()
	must(t, tr.Declare(ctx,
		transport.Exchange{Name: "h", Kind: "x-consistent-hash", Args: map[string]any{"hash-header": "k"}},
		transport.Queue{Name: "a"}, transport.Queue{Name: "b"},
		transport.Binding{Exchange: "h", Key: "1", Queue: "a"},
		transport.Binding{Exchange: "h", Key: "1", Queue: "b"},
	))
	for range 3 {
		must(t, tr.Publish(ctx, transport.Message{Exchange: "h", MessageID: "keyless"}))
	}
	if n := mustInspect(t, tr, "a").Messages; n != 3 {
		t.Errorf("the first bound queue holds %d keyless messages; want 3", n)
	}
	// Redeclared with other arguments it keeps the first ones, as RabbitMQ does.
	must(t, tr.Declare(ctx, transport.Exchange{Name: "h", Kind: "x-consistent-hash", Args: map[string]any{"hash-header": "other"}}))

	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"header not a string", map[string]any{"hash-header": int64(1)}, "hash-header"},
		{"both", map[string]any{"hash-header": "k", "hash-property": "message_id"}, "mutually exclusive"},
		{"unknown property", map[string]any{"hash-property": "body"}, "hash-property"},
	} {
		err := tr.Declare(ctx, transport.Exchange{Name: "h2", Kind: "x-consistent-hash", Args: tc.args})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error naming %s", tc.name, err, tc.want)
		}
	}
	// hash-property message_id spreads by message ID.
	must(t, tr.Declare(ctx,
		transport.Exchange{Name: "byid", Kind: "x-consistent-hash", Args: map[string]any{"hash-property": "message_id"}},
		transport.Binding{Exchange: "byid", Key: "1", Queue: "a"},
		transport.Binding{Exchange: "byid", Key: "1", Queue: "b"},
	))
	for i := range 100 {
		must(t, tr.Publish(ctx, transport.Message{Exchange: "byid", MessageID: fmt.Sprint(i)}))
	}
	if a, bb := mustInspect(t, tr, "a").Messages, mustInspect(t, tr, "b").Messages; a < 3+20 || bb < 20 {
		t.Errorf("100 message IDs split %d/%d; want both queues to take a share", a-3, bb)
	}
}

// TestSingleActiveConsumerArgument: the argument must be a bool, as on
// RabbitMQ.
func TestSingleActiveConsumerArgument(t *testing.T) {
	t.Parallel()
	tr := client(t, memory.NewBroker())
	err := tr.Declare(context.Background(), transport.Queue{Name: "q", Args: map[string]any{"x-single-active-consumer": "yes"}})
	if err == nil || !strings.Contains(err.Error(), "x-single-active-consumer") {
		t.Fatalf("a string x-single-active-consumer: %v; want a refusal naming the argument", err)
	}
}

func mustInspect(t *testing.T, tr transport.Transport, q string) transport.QueueInfo {
	t.Helper()
	info, err := tr.Inspect(context.Background(), q)
	must(t, err)
	return info
}

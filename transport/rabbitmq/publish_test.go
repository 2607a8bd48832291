package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

func TestPublishRoundTrip(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	q := queue(t, tr, "roundtrip", nil)
	ts := time.Now().Truncate(time.Second)
	want := transport.Message{
		RoutingKey:    q,
		Headers:       map[string]any{"s": "v", "n": int64(7), "nested": map[string]any{"a": "b"}, "list": []any{"x", int32(1)}},
		ContentType:   "application/json",
		MessageID:     "id-1",
		CorrelationID: "corr-1",
		Type:          "OrderPlaced",
		AppID:         "app",
		Timestamp:     ts,
		Body:          []byte(`{"ok":true}`),
	}
	if err := tr.Publish(ctxT(t), want); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	d := consume(t, tr, q, 1).next(t)
	got := d.Message
	if got.MessageID != want.MessageID || got.CorrelationID != want.CorrelationID || got.Type != want.Type ||
		got.AppID != want.AppID || got.ContentType != want.ContentType || string(got.Body) != string(want.Body) ||
		!got.Timestamp.Equal(ts) || d.Queue != q || got.RoutingKey != q {
		t.Errorf("delivered %+v; want %+v", got, want)
	}
	nested, ok := got.Headers["nested"].(map[string]any)
	if !ok || nested["a"] != "b" || got.Headers["s"] != "v" {
		t.Errorf("headers %#v; want plain maps with the values sent", got.Headers)
	}
	if err := d.Ack(); err != nil {
		t.Errorf("Ack: %v", err)
	}
}

func TestPublishRefusesBadHeaders(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	err := tr.Publish(ctxT(t), transport.Message{RoutingKey: "x", Headers: map[string]any{"ch": make(chan int)}})
	if err == nil || !strings.HasPrefix(err.Error(), "rabbitmq: ") {
		t.Fatalf("Publish with a channel header = %v; want a rabbitmq: error", err)
	}
}

// TestPublishPipelined publishes from many goroutines with a small window
// and checks that every publish was confirmed and reached the queue.
func TestPublishPipelined(t *testing.T) {
	t.Parallel()
	const goroutines, each = 64, 80
	tr := dial(t, brokerURL(t), rabbitmq.Config{ConfirmWindow: 128, Channels: 3})
	q := queue(t, tr, "pipelined", nil)
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := time.Now()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m := transport.Message{RoutingKey: q, MessageID: fmt.Sprintf("%d-%d", g, i), Body: make([]byte, 256)}
				if err := tr.Publish(ctxT(t), m); err != nil {
					failed.Add(1)
					t.Errorf("Publish: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d publishes in %v", goroutines*each, time.Since(start))
	if failed.Load() > 0 {
		t.FailNow()
	}
	info, err := tr.Inspect(ctxT(t), q)
	if err != nil {
		t.Fatal(err)
	}
	if info.Messages != goroutines*each {
		t.Fatalf("queue holds %d; want %d", info.Messages, goroutines*each)
	}
}

// TestPublishUnroutableAmongRoutable mixes unroutable publishes with
// routable ones of the same body on the same channels: exactly the
// unroutable ones fail.
func TestPublishUnroutableAmongRoutable(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{Channels: 1})
	ex := acemqtest.QueueName(t, "ex")
	t.Cleanup(func() { _ = deleteExchange(brokerURL(t), ex) })
	q := queue(t, tr, "bound", nil)
	if err := tr.Declare(ctxT(t), transport.Exchange{Name: ex, Kind: "direct"}, transport.Binding{Exchange: ex, Key: "bound", Queue: q}); err != nil {
		t.Fatal(err)
	}
	const n = 400
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "bound"
			if i%3 == 0 {
				key = "unbound"
			}
			errs[i] = tr.Publish(ctxT(t), transport.Message{Exchange: ex, RoutingKey: key, MessageID: "same", Body: []byte("same")})
		}()
	}
	wg.Wait()
	routed := 0
	for i, err := range errs {
		if i%3 == 0 {
			if !errors.Is(err, transport.ErrUnroutable) {
				t.Errorf("publish %d to key unbound = %v; want ErrUnroutable", i, err)
			} else if !strings.Contains(err.Error(), ex) || !strings.Contains(err.Error(), `"unbound"`) {
				t.Errorf("the error %q names neither exchange nor key", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("publish %d to key bound = %v; want nil", i, err)
		}
		routed++
	}
	info, err := tr.Inspect(ctxT(t), q)
	if err != nil {
		t.Fatal(err)
	}
	if info.Messages != routed {
		t.Errorf("queue holds %d; want the %d routed", info.Messages, routed)
	}
}

func TestPublishMissingExchangeKeepsOthers(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{Channels: 1})
	q := queue(t, tr, "survivor", nil)
	missing := acemqtest.QueueName(t, "no-such-exchange")
	var wg sync.WaitGroup
	var good atomic.Int64
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: fmt.Sprint(i)}); err != nil {
				t.Errorf("routable publish failed beside the bad one: %v", err)
				return
			}
			good.Add(1)
		}()
	}
	err := tr.Publish(ctxT(t), transport.Message{Exchange: missing, RoutingKey: "k"})
	wg.Wait()
	if !errors.Is(err, transport.ErrNotFound) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Publish to a missing exchange = %v; want ErrNotFound naming it", err)
	}
	// The exchange is checked on a channel of its own, so the publishing
	// channel stays open: nothing in flight on it is sent twice.
	info, err := tr.Inspect(ctxT(t), q)
	if err != nil || info.Messages != 50 {
		t.Fatalf("queue holds %d messages (%v); want exactly the 50 confirmed", info.Messages, err)
	}
}

// TestPublishContextEndsAwaitingConfirm freezes what the broker sends, so
// a written publish waits for its confirm until its ctx ends.
func TestPublishContextEndsAwaitingConfirm(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	p := newProxy(t, hostOf(t, url))
	tr := dial(t, withHost(t, url, p.addr), rabbitmq.Config{Heartbeat: time.Minute})
	q := queue(t, tr, "frozen", nil)
	p.freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := tr.Publish(ctx, transport.Message{RoutingKey: q, MessageID: "late"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish with its confirm held back = %v; want DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("Publish returned after %v; want about its 300ms deadline", waited)
	}
	cancelled, cancel2 := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel2() }()
	if err := tr.Publish(cancelled, transport.Message{RoutingKey: q, MessageID: "cancelled"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Publish cancelled while awaiting its confirm = %v; want Canceled", err)
	}
	p.thaw()
	if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: "after"}); err != nil {
		t.Fatalf("Publish after the thaw: %v", err)
	}
	if err := tr.Health(ctxT(t)); err != nil {
		t.Errorf("Health after the thaw: %v", err)
	}
}

func TestPublishWaitsForTheConnection(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	p := newProxy(t, hostOf(t, url))
	tr := dial(t, withHost(t, url, p.addr), rabbitmq.Config{})
	q := queue(t, tr, "outage", nil)
	p.stop()
	eventually(t, 5*time.Second, "Health reports the outage", func() bool { return tr.Health(ctxT(t)) != nil })

	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := tr.Publish(short, transport.Message{RoutingKey: q}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish during the outage with a short ctx = %v; want DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() { done <- tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: "patient"}) }()
	time.Sleep(300 * time.Millisecond)
	p.start()
	if err := <-done; err != nil {
		t.Fatalf("Publish that waited for the connection: %v", err)
	}
	d, ok, err := tr.Get(ctxT(t), q)
	if err != nil || !ok || d.MessageID != "patient" {
		t.Fatalf("Get = %q, %v, %v; want the patient message", d.MessageID, ok, err)
	}
	_ = d.Ack()
}

// TestHeaderValuesAtTheEdges: the values wire's rules let through at their
// edges (years 0 and 9999, a time before 1970, the largest floats) are
// taken by the broker and read back; the ones refused are refused before
// the broker sees them, and the connection stays up.
func TestHeaderValuesAtTheEdges(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	q := queue(t, tr, "edges", nil)
	sent := map[string]any{
		"year0":    time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		"year9999": time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		"before":   time.Date(1960, 6, 1, 12, 0, 0, 0, time.UTC),
		"max64":    math.MaxFloat64,
		"max32":    float32(math.MaxFloat32),
		"tiny":     math.SmallestNonzeroFloat64,
	}
	if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: "edges", Headers: sent}); err != nil {
		t.Fatalf("Publish at the edges: %v", err)
	}
	for _, bad := range []any{math.NaN(), math.Inf(-1), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, Headers: map[string]any{"bad": bad}}); err == nil {
			t.Errorf("Publish with header %v = nil; want it refused", bad)
		}
	}
	d := consume(t, tr, q, 1).next(t)
	for k, want := range sent {
		got := d.Headers[k]
		if wt, ok := want.(time.Time); ok {
			if gt, ok := got.(time.Time); !ok || !gt.Equal(wt) {
				t.Errorf("header %s came back as %v; want %v", k, got, want)
			}
			continue
		}
		if got != want {
			t.Errorf("header %s came back as %v (%T); want %v", k, got, got, want)
		}
	}
	_ = d.Ack()
	if err := tr.Health(ctxT(t)); err != nil {
		t.Errorf("Health: %v", err)
	}
}

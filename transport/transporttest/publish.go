package transporttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/acemq/acemq/transport"
)

// fullMessage returns a message with every field set and a header of each
// type the suite promises to carry.
func fullMessage(queue string) transport.Message {
	return transport.Message{
		RoutingKey: queue,
		Headers: map[string]any{
			"string":  "text",
			"bool":    true,
			"int32":   int32(-7),
			"int64":   int64(1) << 40,
			"float64": 2.5,
			"bytes":   []byte{0, 1, 2, 255},
			"time":    time.Date(2023, 4, 5, 6, 7, 8, 0, time.UTC),
			"table": map[string]any{
				"name":  "inner",
				"count": int64(3),
				"deep":  map[string]any{"flag": false},
			},
			"array": []any{"a", int64(2), true, map[string]any{"k": "v"}},
		},
		ContentType:   "application/json",
		MessageID:     "message-1",
		CorrelationID: "correlation-1",
		Type:          "transporttest.Thing",
		AppID:         "transporttest",
		ReplyTo:       "somewhere.else",
		Timestamp:     time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC),
		Body:          []byte(`{"hello":"world"}`),
	}
}

func testRoundTrip(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	want := fullMessage(q)
	e.publish(tr, want)
	d := e.consume(tr, q, 1).next()
	checkMessage(e.t, want, d.Message)
	if d.Queue != q || d.Redelivered {
		e.t.Errorf("delivery: Queue %q, Redelivered %v; want %q, false", d.Queue, d.Redelivered, q)
	}
	ack(e.t, d)
}

// testPropertiesOnly round-trips a message whose every property is set and
// that has no header at all: wire format v2's usual message.
func testPropertiesOnly(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	want := fullMessage(q)
	want.Headers = nil
	e.publish(tr, want)
	d := e.consume(tr, q, 1).next()
	checkMessage(e.t, want, d.Message)
	if len(d.Headers) != 0 {
		e.t.Errorf("a message sent without headers arrived with %v", d.Headers)
	}
	ack(e.t, d)
}

func testPublisherBuffers(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	body := []byte("original")
	headers := map[string]any{"k": "original"}
	e.publish(tr, transport.Message{RoutingKey: q, MessageID: "m", Body: body, Headers: headers})
	copy(body, "CHANGED!")
	headers["k"] = "changed"
	headers["added"] = "added"

	d := e.consume(tr, q, 1).next()
	if string(d.Body) != "original" {
		e.t.Errorf("Body = %q after the publisher reused its buffer; want %q", d.Body, "original")
	}
	if diff := diffHeaders(map[string]any{"k": "original"}, d.Headers); diff != "" {
		e.t.Errorf("headers changed after the publisher reused its map:%s", diff)
	}
	ack(e.t, d)
}

func testUnroutable(e *env) {
	tr := e.client()
	ex := e.exchange("x", "direct")
	q := e.queue("q", nil)
	e.declare(transport.Binding{Exchange: ex, Key: "bound", Queue: q})

	err := tr.Publish(e.ctx(), transport.Message{Exchange: ex, RoutingKey: "unbound", Body: []byte("x")})
	if !errors.Is(err, transport.ErrUnroutable) {
		e.t.Errorf("Publish to %q with an unbound key = %v; want ErrUnroutable", ex, err)
	}
	err = tr.Publish(e.ctx(), transport.Message{RoutingKey: e.name("no-such-queue"), Body: []byte("x")})
	if !errors.Is(err, transport.ErrUnroutable) {
		e.t.Errorf("Publish through the default exchange to a missing queue = %v; want ErrUnroutable", err)
	}
	e.publish(tr, transport.Message{Exchange: ex, RoutingKey: "bound", MessageID: "routed"})
	if ids := e.drainIDs(tr, q); !slices.Equal(ids, []string{"routed"}) {
		e.t.Errorf("queue holds %q; want only the routed message", ids)
	}
}

func testMissingExchange(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	missing := e.name("no-such-exchange")
	err := tr.Publish(e.ctx(), transport.Message{Exchange: missing, RoutingKey: q, Body: []byte("x")})
	if !errors.Is(err, transport.ErrNotFound) {
		e.t.Errorf("Publish to missing exchange %q = %v; want ErrNotFound", missing, err)
	}
	// The client must still work afterwards.
	e.publish(tr, transport.Message{RoutingKey: q, MessageID: "after"})
	if ids := e.drainIDs(tr, q); !slices.Equal(ids, []string{"after"}) {
		e.t.Errorf("queue holds %q; want the message published after the failure", ids)
	}
}

func testPublishEndedContext(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := tr.Publish(ctx, transport.Message{RoutingKey: q, Body: []byte("x")})
	if !errors.Is(err, context.Canceled) {
		e.t.Errorf("Publish with an ended ctx = %v; want context.Canceled", err)
	}
	if ids := e.drainIDs(tr, q); len(ids) != 0 {
		e.t.Errorf("a publish refused for its ended ctx reached the queue: %q", ids)
	}
}

// checkRouting publishes one message per key to ex and checks which queues
// took which, by message ID (the key itself). A key no queue wants must be
// refused as unroutable.
func checkRouting(e *env, ex string, keys []string, want map[string][]string) {
	e.t.Helper()
	tr := e.client()
	routed := make(map[string]bool)
	for _, keys := range want {
		for _, k := range keys {
			routed[k] = true
		}
	}
	for _, key := range keys {
		err := tr.Publish(e.ctx(), transport.Message{Exchange: ex, RoutingKey: key, MessageID: key})
		switch {
		case routed[key] && err != nil:
			e.t.Errorf("Publish to %q with key %q: %v", ex, key, err)
		case !routed[key] && !errors.Is(err, transport.ErrUnroutable):
			e.t.Errorf("Publish to %q with key %q = %v; want ErrUnroutable", ex, key, err)
		}
	}
	for q, keys := range want {
		got := e.drainIDs(tr, q)
		slices.Sort(got)
		keys = slices.Sorted(slices.Values(keys))
		if !slices.Equal(got, keys) {
			e.t.Errorf("queue %q took %q; want %q", q, got, keys)
		}
	}
}

func testRoutingDirect(e *env) {
	ex := e.exchange("direct", "direct")
	qa, qb, qab := e.queue("a", nil), e.queue("b", nil), e.queue("ab", nil)
	e.declare(
		transport.Binding{Exchange: ex, Key: "a", Queue: qa},
		transport.Binding{Exchange: ex, Key: "b", Queue: qb},
		transport.Binding{Exchange: ex, Key: "a", Queue: qab},
		transport.Binding{Exchange: ex, Key: "b", Queue: qab},
	)
	checkRouting(e, ex, []string{"a", "b", "c", "a.b"}, map[string][]string{
		qa: {"a"}, qb: {"b"}, qab: {"a", "b"},
	})
}

func testRoutingTopic(e *env) {
	ex := e.exchange("topic", "topic")
	star, hash, suffix, exact := e.queue("star", nil), e.queue("hash", nil), e.queue("suffix", nil), e.queue("exact", nil)
	e.declare(
		transport.Binding{Exchange: ex, Key: "orders.*", Queue: star},
		transport.Binding{Exchange: ex, Key: "orders.#", Queue: hash},
		transport.Binding{Exchange: ex, Key: "#.eu", Queue: suffix},
		transport.Binding{Exchange: ex, Key: "#.eu.#", Queue: suffix}, // overlaps: still one copy
		transport.Binding{Exchange: ex, Key: "billing.paid", Queue: exact},
	)
	checkRouting(e, ex,
		[]string{"orders", "orders.created", "orders.created.eu", "eu", "x.eu.y", "billing.paid", "billing.due", "ordersx.created"},
		map[string][]string{
			star:   {"orders.created"},
			hash:   {"orders", "orders.created", "orders.created.eu"},
			suffix: {"orders.created.eu", "eu", "x.eu.y"},
			exact:  {"billing.paid"},
		})
}

func testRoutingFanout(e *env) {
	ex := e.exchange("fanout", "fanout")
	q1, q2 := e.queue("one", nil), e.queue("two", nil)
	e.declare(
		transport.Binding{Exchange: ex, Key: "ignored", Queue: q1},
		transport.Binding{Exchange: ex, Queue: q2},
	)
	checkRouting(e, ex, []string{"any", "other.key"}, map[string][]string{
		q1: {"any", "other.key"}, q2: {"any", "other.key"},
	})
}

func testConcurrentPublish(e *env) {
	const publishers, each = 16, 50
	tr := e.client()
	q := e.queue("q", nil)
	ctx := e.ctx()
	var wg sync.WaitGroup
	errs := make(chan error, publishers*each)
	for p := range publishers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("%d-%d", p, i)
				if err := tr.Publish(ctx, transport.Message{RoutingKey: q, MessageID: id, Body: []byte(id)}); err != nil {
					errs <- fmt.Errorf("publish %s: %w", id, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Error(err)
	}
	if e.t.Failed() {
		return
	}

	c := e.consume(e.client(), q, 100)
	seen := make(map[string]int, publishers*each)
	for range publishers * each {
		d := c.next()
		seen[d.MessageID]++
		if string(d.Body) != d.MessageID {
			e.t.Errorf("message %q has body %q", d.MessageID, d.Body)
		}
		ack(e.t, d)
	}
	c.none()
	for p := range publishers {
		for i := range each {
			if id := fmt.Sprintf("%d-%d", p, i); seen[id] != 1 {
				e.t.Errorf("message %s was consumed %d times; want once", id, seen[id])
			}
		}
	}
}

// testPublishBatch runs where the transport implements
// transport.BatchPublisher: a batch larger than a confirm window is
// delivered once each, every message whole; one message no queue takes
// fails alone, in its place; a batch with an ended ctx publishes nothing.
func testPublishBatch(e *env) {
	tr := e.client()
	bp, ok := tr.(transport.BatchPublisher)
	if !ok {
		e.t.Skip("the transport does not implement transport.BatchPublisher")
	}
	const n, lost = 1500, 700
	q := e.queue("q", nil)
	ms := make([]transport.Message, n)
	for i := range ms {
		id := fmt.Sprintf("b-%d", i)
		ms[i] = transport.Message{RoutingKey: q, MessageID: id, Body: []byte(id)}
	}
	ms[0] = fullMessage(q)
	ms[lost].RoutingKey = e.name("no-such-queue")
	errs := bp.PublishBatch(e.ctx(), ms)
	if len(errs) != n {
		e.t.Fatalf("PublishBatch returned %d results for %d messages", len(errs), n)
	}
	for i, err := range errs {
		switch {
		case i == lost && !errors.Is(err, transport.ErrUnroutable):
			e.t.Errorf("message %d, to a missing queue: %v; want ErrUnroutable", i, err)
		case i != lost && err != nil:
			e.t.Errorf("message %d: %v", i, err)
		}
	}
	if e.t.Failed() {
		return
	}
	c := e.consume(e.client(), q, 200)
	seen := make(map[string]int, n)
	for range n - 1 {
		d := c.next()
		seen[d.MessageID]++
		if d.MessageID == ms[0].MessageID {
			checkMessage(e.t, ms[0], d.Message)
		} else if string(d.Body) != d.MessageID {
			e.t.Errorf("message %q has body %q", d.MessageID, d.Body)
		}
		ack(e.t, d)
	}
	c.none()
	for i, m := range ms {
		if want := map[bool]int{true: 0, false: 1}[i == lost]; seen[m.MessageID] != want {
			e.t.Errorf("message %s was consumed %d times; want %d", m.MessageID, seen[m.MessageID], want)
		}
	}

	ctx, cancel := context.WithCancel(e.ctx())
	cancel()
	for i, err := range bp.PublishBatch(ctx, ms[1:50]) {
		if !errors.Is(err, context.Canceled) {
			e.t.Errorf("message %d of a batch with an ended ctx: %v; want context.Canceled", i, err)
		}
	}
	if info := e.inspect(q); info.Messages != 0 {
		e.t.Errorf("%d messages arrived from a batch with an ended ctx", info.Messages)
	}
}

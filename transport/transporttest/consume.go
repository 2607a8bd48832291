package transporttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/acemq/acemq/transport"
)

func testPrefetch(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	e.publishN(tr, q, "m", 10)
	c := e.consume(tr, q, 3)
	held := []transport.Delivery{c.next(), c.next(), c.next()}
	c.none()
	if info := e.inspect(q); info.Messages != 7 {
		e.t.Errorf("with 3 of 10 unsettled, Inspect reports %d ready; want 7", info.Messages)
	}
	// Each settlement lets exactly one more through, in queue order.
	for i := 3; i < 10; i++ {
		ack(e.t, held[0])
		held = append(held[1:], c.next())
		if d := held[2]; d.MessageID != fmt.Sprintf("m-%d", i) {
			e.t.Errorf("delivery %d is %q; want m-%d", i, d.MessageID, i)
		}
	}
	c.none()
	for _, d := range held {
		ack(e.t, d)
	}
}

func testAckRemoves(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	e.publishN(tr, q, "m", 1)
	c := e.consume(tr, q, 1)
	ack(e.t, c.next())
	c.cancel()
	if err := c.returned(); err != nil {
		e.t.Errorf("Consume returned %v after its ctx ended; want nil", err)
	}
	if info := e.inspect(q); info.Messages != 0 {
		e.t.Errorf("after the ack, Inspect reports %d ready; want 0", info.Messages)
	}
	if ids := e.drainIDs(tr, q); len(ids) != 0 {
		e.t.Errorf("after the ack, the queue still holds %q", ids)
	}
}

func testNackRequeue(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	e.publishN(tr, q, "m", 1)
	c := e.consume(tr, q, 1)
	first := c.next()
	if first.Redelivered {
		e.t.Error("the first delivery is marked redelivered")
	}
	nack(e.t, first, true)
	again := c.next()
	if again.MessageID != first.MessageID || string(again.Body) != string(first.Body) {
		e.t.Errorf("after Nack(requeue) got message %q body %q; want %q body %q",
			again.MessageID, again.Body, first.MessageID, first.Body)
	}
	if !again.Redelivered {
		e.t.Error("a message requeued by Nack came back with Redelivered false")
	}
	ack(e.t, again)
	c.none()
}

func testNackDeadLetters(e *env) {
	tr := e.client()
	dlq := e.queue("dlq", nil)
	q := e.queue("q", map[string]any{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
	e.publish(tr, transport.Message{RoutingKey: q, MessageID: "m", Body: []byte("body")})
	c := e.consume(tr, q, 1)
	nack(e.t, c.next(), false)
	c.none()
	d := e.consume(tr, dlq, 1).next()
	if d.MessageID != "m" || string(d.Body) != "body" || d.Queue != dlq {
		e.t.Errorf("dead letter: message %q body %q queue %q; want %q %q %q", d.MessageID, d.Body, d.Queue, "m", "body", dlq)
	}
	ack(e.t, d)
}

// testTTLDeadLetters builds a retry tier the way acemq does: a queue with a
// TTL and no consumer that dead-letters through the default exchange back to
// the work queue.
func testTTLDeadLetters(e *env) {
	const ttl = 200 * time.Millisecond
	tr := e.client()
	target := e.queue("target", nil)
	tier := e.queue("retry.200ms", map[string]any{
		"x-message-ttl":             int64(ttl / time.Millisecond),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": target,
	})
	c := e.consume(tr, target, 10)
	start := time.Now()
	e.publish(tr, transport.Message{RoutingKey: tier, MessageID: "first", Body: []byte("1")})
	time.Sleep(ttl / 2)
	e.publish(tr, transport.Message{RoutingKey: tier, MessageID: "second", Body: []byte("2")})

	for i, want := range []string{"first", "second"} {
		d := c.next()
		elapsed := time.Since(start)
		if d.MessageID != want {
			e.t.Errorf("dead letter %d is %q; want %q", i, d.MessageID, want)
		}
		if early := ttl + time.Duration(i)*ttl/2 - 50*time.Millisecond; elapsed < early {
			e.t.Errorf("dead letter %q arrived after %v; want no sooner than %v", d.MessageID, elapsed, early)
		}
		if d.Queue != target {
			e.t.Errorf("dead letter came from queue %q; want %q", d.Queue, target)
		}
		ack(e.t, d)
	}
	if info := e.inspect(tier); info.Messages != 0 {
		e.t.Errorf("the tier queue still holds %d messages", info.Messages)
	}
}

func testCompetingConsumers(e *env) {
	const n = 20
	tr := e.client()
	q := e.queue("q", nil)
	c1, c2 := e.consume(tr, q, 5), e.consume(tr, q, 5)
	e.eventually("two consumers registered", func() bool { return e.inspect(q).Consumers == 2 })
	e.publishN(tr, q, "m", n)

	seen := make(map[string]int)
	per := [2]int{}
	timeout := time.After(e.f.Timeout)
	for got := 0; got < n; got++ {
		var d transport.Delivery
		select {
		case d = <-c1.deliveries:
			per[0]++
		case d = <-c2.deliveries:
			per[1]++
		case <-timeout:
			e.t.Fatalf("only %d of %d messages were delivered within %v", got, n, e.f.Timeout)
		}
		seen[d.MessageID]++
		ack(e.t, d)
	}
	c1.none()
	c2.none()
	for i := range n {
		if id := fmt.Sprintf("m-%d", i); seen[id] != 1 {
			e.t.Errorf("message %s was delivered %d times; want once", id, seen[id])
		}
	}
	if per[0] == 0 || per[1] == 0 {
		e.t.Errorf("deliveries per consumer: %v; want both consumers to get some", per)
	}
}

func testConsumeWaits(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	e.publishN(tr, q, "m", 3)
	c := e.consume(tr, q, 2)
	first, second := c.next(), c.next()
	c.cancel()
	c.running()
	ack(e.t, first)
	c.running()
	nack(e.t, second, true)
	if err := c.returned(); err != nil {
		e.t.Errorf("Consume returned %v after its ctx ended; want nil", err)
	}
	select {
	case d := <-c.deliveries:
		e.t.Errorf("message %q was delivered after the ctx ended", d.MessageID)
	default:
	}
	// Consume settled nothing itself: the acked one is gone, the requeued
	// one is back beside the one never handed out.
	e.eventually("2 messages ready after Consume returned", func() bool { return e.inspect(q).Messages == 2 })
	ids := e.drainIDs(tr, q)
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"m-1", "m-2"}) {
		e.t.Errorf("after Consume returned the queue holds %q; want m-1 and m-2", ids)
	}
}

func testConsumeMissingQueue(e *env) {
	tr := e.client()
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		done <- tr.Consume(ctx, e.name("no-such-queue"), 1, func(d transport.Delivery) { _ = d.Ack() })
	}()
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrNotFound) {
			e.t.Errorf("Consume of a missing queue = %v; want ErrNotFound", err)
		}
	case <-time.After(e.f.Timeout):
		cancel()
		<-done
		e.t.Errorf("Consume of a missing queue did not return within %v", e.f.Timeout)
	}
}

// settleSafely calls settle, turning a panic into a test failure.
func settleSafely(e *env, what string, settle func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e.t.Errorf("%s panicked: %v", what, r)
			err = errors.New("panicked")
		}
	}()
	return settle()
}

func testCloseRequeues(e *env) {
	a, b := e.client(), e.client()
	q := e.queue("q", nil)
	e.publishN(a, q, "m", 2)
	c := e.consume(a, q, 5)
	first, second := c.next(), c.next()
	if err := a.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	if err := settleSafely(e, "Ack after Close", first.Ack); err == nil {
		e.t.Error("Ack after the client closed succeeded; want an error")
	}
	if err := settleSafely(e, "Nack after Close", func() error { return second.Nack(false) }); err == nil {
		e.t.Error("Nack after the client closed succeeded; want an error")
	}
	c.returned() // any error: the client is gone

	cb := e.consume(b, q, 5)
	var ids []string
	for range 2 {
		d := cb.next()
		if !d.Redelivered {
			e.t.Errorf("message %q requeued by Close came back with Redelivered false", d.MessageID)
		}
		ids = append(ids, d.MessageID)
		ack(e.t, d)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"m-0", "m-1"}) {
		e.t.Errorf("after Close another client got %q; want m-0 and m-1", ids)
	}
	cb.none()
}

func testGet(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	if _, ok, err := tr.Get(e.ctx(), q); ok || err != nil {
		e.t.Fatalf("Get from an empty queue = %v, %v; want false, nil", ok, err)
	}
	full := fullMessage(q)
	e.publish(tr, full)
	e.publishN(tr, q, "m", 1)

	get := func() transport.Delivery {
		e.t.Helper()
		d, ok, err := tr.Get(e.ctx(), q)
		if err != nil || !ok {
			e.t.Fatalf("Get = %v, %v; want a message", ok, err)
		}
		return d
	}
	d := get()
	checkMessage(e.t, full, d.Message)
	if d.Redelivered || d.Queue != q {
		e.t.Errorf("Get: Redelivered %v, Queue %q; want false, %q", d.Redelivered, d.Queue, q)
	}
	ack(e.t, d)
	d = get()
	if d.MessageID != "m-0" {
		e.t.Errorf("second Get is %q; want m-0", d.MessageID)
	}
	nack(e.t, d, true)
	d = get()
	if d.MessageID != "m-0" || !d.Redelivered {
		e.t.Errorf("Get after Nack(requeue) is %q, Redelivered %v; want m-0, true", d.MessageID, d.Redelivered)
	}
	ack(e.t, d)
	if _, ok, err := tr.Get(e.ctx(), q); ok || err != nil {
		e.t.Errorf("Get from the emptied queue = %v, %v; want false, nil", ok, err)
	}
}

package transporttest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/acemq/acemq/transport"
)

// The subtests in this file check the parts ordered consumers are built
// from: exchange deletion, exchange-to-exchange bindings, the
// x-consistent-hash exchange, single-active-consumer queues, leases and
// hand-over consumers.

func testDeleteExchange(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	ex := e.exchange("x", "direct")
	e.declare(transport.Binding{Exchange: ex, Key: "k", Queue: q})
	e.publish(tr, transport.Message{Exchange: ex, RoutingKey: "k", MessageID: "before"})

	if err := tr.DeleteExchange(e.ctx(), ex); err != nil {
		e.t.Fatalf("DeleteExchange(%q): %v", ex, err)
	}
	err := tr.Publish(e.ctx(), transport.Message{Exchange: ex, RoutingKey: "k", MessageID: "deleted"})
	if !errors.Is(err, transport.ErrNotFound) {
		e.t.Errorf("publishing to a deleted exchange = %v; want ErrNotFound", err)
	}
	if err := tr.DeleteExchange(e.ctx(), ex); err != nil {
		e.t.Errorf("deleting a missing exchange = %v; want nil", err)
	}
	// Declared again, it has none of its old bindings.
	e.declare(transport.Exchange{Name: ex, Kind: "direct"})
	err = tr.Publish(e.ctx(), transport.Message{Exchange: ex, RoutingKey: "k", MessageID: "again"})
	if !errors.Is(err, transport.ErrUnroutable) {
		e.t.Errorf("publishing to an exchange declared again after its deletion = %v; want ErrUnroutable (its binding went with it)", err)
	}
	if ids := e.drainIDs(tr, q); !slices.Equal(ids, []string{"before"}) {
		e.t.Errorf("queue holds %q; want only the message published before the deletion", ids)
	}
}

func testExchangeBinding(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	up := e.exchange("up", "topic")
	mid := e.exchange("mid", "fanout")
	e.declare(
		transport.ExchangeBinding{Source: up, Key: "orders.#", Destination: mid},
		transport.Binding{Exchange: mid, Queue: q},
	)
	e.publish(tr, transport.Message{Exchange: up, RoutingKey: "orders.placed", MessageID: "through"})
	err := tr.Publish(e.ctx(), transport.Message{Exchange: up, RoutingKey: "payments.made", MessageID: "other"})
	if !errors.Is(err, transport.ErrUnroutable) {
		e.t.Errorf("a key the exchange binding does not match = %v; want ErrUnroutable", err)
	}

	// A loop of bindings routes each message once.
	e.declare(transport.ExchangeBinding{Source: mid, Key: "", Destination: up})
	e.publish(tr, transport.Message{Exchange: up, RoutingKey: "orders.paid", MessageID: "loop"})
	if ids := e.drainIDs(tr, q); !slices.Equal(ids, []string{"through", "loop"}) {
		e.t.Errorf("queue holds %q; want through and loop, once each", ids)
	}

	missing := e.name("no-such-exchange")
	err = tr.Declare(e.ctx(), transport.ExchangeBinding{Source: missing, Key: "k", Destination: mid})
	if !errors.Is(err, transport.ErrNotFound) {
		e.t.Errorf("binding from missing exchange %q = %v; want ErrNotFound", missing, err)
	}
	err = tr.Declare(e.ctx(), transport.ExchangeBinding{Source: up, Key: "k", Destination: missing})
	if !errors.Is(err, transport.ErrNotFound) {
		e.t.Errorf("binding to missing exchange %q = %v; want ErrNotFound", missing, err)
	}

	// Deleting the destination takes the binding with it.
	if err := tr.DeleteExchange(e.ctx(), mid); err != nil {
		e.t.Fatalf("DeleteExchange(%q): %v", mid, err)
	}
	err = tr.Publish(e.ctx(), transport.Message{Exchange: up, RoutingKey: "orders.shipped", MessageID: "after"})
	if !errors.Is(err, transport.ErrUnroutable) {
		e.t.Errorf("publishing through a deleted exchange = %v; want ErrUnroutable", err)
	}
}

// hashExchange declares an x-consistent-hash exchange hashing header
// x-key, with n queues bound to it, each with weight weights[i] (1 when
// weights is shorter), and returns the exchange and the queues.
func hashExchange(e *env, n int, weights ...int) (string, []string) {
	e.t.Helper()
	ex := e.declareExchange(transport.Exchange{Name: e.name("hash"), Kind: "x-consistent-hash", Args: map[string]any{"hash-header": "x-key"}})
	qs := make([]string, n)
	for i := range qs {
		w := 1
		if i < len(weights) {
			w = weights[i]
		}
		qs[i] = e.queue(fmt.Sprintf("p%d", i), nil)
		e.declare(transport.Binding{Exchange: ex, Key: strconv.Itoa(w), Queue: qs[i]})
	}
	return ex, qs
}

func testConsistentHash(e *env) {
	tr := e.client()
	ex, qs := hashExchange(e, 4)
	// Publishers reach it through an exchange-to-exchange binding, as
	// ordered consumers bind it.
	up := e.exchange("up", "direct")
	e.declare(transport.ExchangeBinding{Source: up, Key: "orders", Destination: ex})

	const keys, per = 40, 10
	for i := range per {
		for k := range keys {
			e.publish(tr, transport.Message{
				Exchange:   up,
				RoutingKey: "orders",
				MessageID:  fmt.Sprintf("k%d/%d", k, i),
				Headers:    map[string]any{"x-key": fmt.Sprintf("order-%d", k)},
			})
		}
	}
	for i := range 5 {
		e.publish(tr, transport.Message{Exchange: ex, MessageID: fmt.Sprintf("keyless/%d", i)})
	}

	home := map[string]int{}   // key → the queue it landed in
	seen := map[string][]int{} // key → its numbers, in queue order
	keyless := map[int]int{}   // queue → keyless messages in it
	for qi, q := range qs {
		for _, id := range e.drainIDs(tr, q) {
			key, num, _ := strings.Cut(id, "/")
			n, _ := strconv.Atoi(num)
			if key == "keyless" {
				keyless[qi]++
				continue
			}
			if h, ok := home[key]; ok && h != qi {
				e.t.Errorf("key %s landed in %s and %s; want one queue per key", key, qs[h], q)
			}
			home[key] = qi
			seen[key] = append(seen[key], n)
		}
	}
	want := make([]int, per)
	for i := range want {
		want[i] = i
	}
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		if !slices.Equal(seen[key], want) {
			e.t.Errorf("key %s arrived as %v; want %v (all, in publish order)", key, seen[key], want)
		}
	}
	for qi, q := range qs {
		if !slices.Contains(slices.Collect(maps.Values(home)), qi) {
			e.t.Errorf("no key landed in %s; want %d keys spread over all %d queues", q, keys, len(qs))
		}
	}
	if len(keyless) != 1 {
		e.t.Errorf("messages without the hash header landed in %d queues (%v); want one", len(keyless), keyless)
	}

	// A weight must be a positive integer.
	for _, key := range []string{"heavy", "0"} {
		err := tr.Declare(e.ctx(), transport.Binding{Exchange: ex, Key: key, Queue: qs[0]})
		if err == nil {
			e.t.Errorf("binding a queue to an x-consistent-hash exchange with key %q succeeded; want an error", key)
		}
	}
}

func testConsistentHashWeights(e *env) {
	tr := e.client()
	ex, qs := hashExchange(e, 2, 1, 3)
	const keys = 400
	for k := range keys {
		e.publish(tr, transport.Message{Exchange: ex, MessageID: strconv.Itoa(k), Headers: map[string]any{"x-key": "key-" + strconv.Itoa(k)}})
	}
	light, heavy := len(e.drainIDs(tr, qs[0])), len(e.drainIDs(tr, qs[1]))
	if light+heavy != keys {
		e.t.Fatalf("the queues took %d + %d messages; want %d", light, heavy, keys)
	}
	// Weight 3 against 1: three quarters of the keys, give or take.
	if heavy < keys/2 || heavy > keys*9/10 {
		e.t.Errorf("the queue of weight 3 took %d of %d keys, the one of weight 1 %d; want about three quarters", heavy, keys, light)
	}
}

// sacQueue declares a single-active-consumer queue.
func sacQueue(e *env, quorum bool) string {
	e.t.Helper()
	return e.declareQueue(transport.Queue{Name: e.name("sac"), Quorum: quorum, Args: map[string]any{"x-single-active-consumer": true}})
}

// subscribed waits until queue has a consumer, so that the next one to
// subscribe is a standby.
func subscribed(e *env, queue string) {
	e.t.Helper()
	e.eventually("the first consumer subscribed", func() bool { return e.inspect(queue).Consumers >= 1 })
}

func testSingleActiveConsumer(e *env, quorum bool) {
	q := sacQueue(e, quorum)
	trA, trB := e.client(), e.client()
	a := e.consume(trA, q, 100)
	subscribed(e, q)
	b := e.consume(trB, q, 100)
	if !quorum {
		e.eventually("two consumers counted", func() bool { return e.inspect(q).Consumers == 2 })
	}
	e.publishN(trA, q, "m", 10)
	for i := range 10 {
		d := a.next()
		if want := fmt.Sprintf("m-%d", i); d.MessageID != want {
			e.t.Fatalf("the active consumer got %q; want %q", d.MessageID, want)
		}
		ack(e.t, d)
	}
	b.none()
	// RabbitMQ 3.10 counts a classic queue's standbys, not a quorum queue's.
	want := 2
	if quorum {
		want = 1
	}
	if n := e.inspect(q).Consumers; n != want {
		e.t.Errorf("Inspect counts %d consumers of a single-active-consumer queue with one standby; want %d", n, want)
	}

	a.cancel()
	if err := a.returned(); err != nil {
		e.t.Fatalf("Consume of the active consumer returned %v; want nil", err)
	}
	e.publishN(trA, q, "n", 3)
	for i := range 3 {
		d := b.next()
		if want := fmt.Sprintf("n-%d", i); d.MessageID != want {
			e.t.Fatalf("the new active consumer got %q; want %q", d.MessageID, want)
		}
		ack(e.t, d)
	}
}

// leaser returns tr as a transport.Leaser, skipping the test when it is not.
func leaser(e *env, tr transport.Transport) transport.Leaser {
	e.t.Helper()
	l, ok := tr.(transport.Leaser)
	if !ok {
		e.t.Skipf("%T is not a transport.Leaser", tr)
	}
	return l
}

// lease takes name with l, failing the test on error; the lease is
// released when the test ends.
func (e *env) lease(l transport.Leaser, name string) transport.Lease {
	e.t.Helper()
	ls, err := l.Lease(e.ctx(), name)
	if err != nil {
		e.t.Fatalf("Lease(%q): %v", name, err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e.f.Timeout)
		defer cancel()
		_ = ls.Release(ctx) // the test may have released it, or closed its client
	})
	return ls
}

func wantLocked(e *env, l transport.Leaser, name, why string) {
	e.t.Helper()
	ls, err := l.Lease(e.ctx(), name)
	if err == nil {
		_ = ls.Release(e.ctx())
	}
	if !errors.Is(err, transport.ErrLocked) {
		e.t.Errorf("Lease(%q) %s = %v; want ErrLocked", name, why, err)
	}
}

func testLease(e *env) {
	one, two := leaser(e, e.client()), leaser(e, e.client())
	name := e.name("lease")
	held := e.lease(one, name)
	wantLocked(e, two, name, "while another client holds it")
	wantLocked(e, one, name, "while the same client holds it")
	if err := held.Release(e.ctx()); err != nil {
		e.t.Fatalf("Release: %v", err)
	}
	if err := held.Release(e.ctx()); err != nil {
		e.t.Errorf("a second Release = %v; want nil", err)
	}
	taken := e.lease(two, name)
	wantLocked(e, one, name, "after the holder released it and another took it")
	select {
	case <-held.Lost():
		e.t.Error("Lost is closed after Release; want it closed only when the lease ends without Release")
	default:
	}
	select {
	case <-taken.Lost():
		e.t.Error("Lost of a held lease is closed")
	default:
	}
}

func testLeaseHolderCloses(e *env) {
	holder := e.client()
	other := leaser(e, e.client())
	name := e.name("lease")
	held := e.lease(leaser(e, holder), name)
	wantLocked(e, other, name, "while another client holds it")
	if err := holder.Close(); err != nil {
		e.t.Fatalf("Close of the holder: %v", err)
	}
	select {
	case <-held.Lost():
	case <-e.ctx().Done():
		e.t.Fatalf("Lost not closed within %v of the holder's Close", e.f.Timeout)
	}
	// The broker frees it with the holder's connection; it may take a moment.
	var ls transport.Lease
	e.eventually("another client takes the lease after the holder closed", func() bool {
		var err error
		ls, err = other.Lease(e.ctx(), name)
		return err == nil
	})
	if err := ls.Release(e.ctx()); err != nil {
		e.t.Errorf("Release: %v", err)
	}
}

// handOverPrefix is what the hand-over tests name their messages.
const handOverPrefix = "m"

func testHandOver(e *env, quorum bool) {
	q := sacQueue(e, quorum)
	trA, trB := e.client(), e.client()
	a := e.consumeHandOver(trA, q, 10)
	subscribed(e, q)
	b := e.consumeHandOver(trB, q, 10)
	e.sleepQuiet() // B's subscription reaches the broker
	e.publishN(trA, q, handOverPrefix, 15)

	var held []transport.Delivery
	for i := range 10 {
		d := a.next()
		if want := fmt.Sprintf("%s-%d", handOverPrefix, i); d.MessageID != want {
			e.t.Fatalf("the active consumer got %q; want %q", d.MessageID, want)
		}
		held = append(held, d)
	}
	b.none()
	// A stops taking more first: acks free room under its prefetch, and the
	// broker fills it (A takes those in but hands them out no more).
	a.cancel()
	for _, d := range held[:3] {
		ack(e.t, d)
	}
	for _, d := range held[3:9] {
		release(e, d)
	}
	a.running()
	b.none()
	release(e, held[9])
	if err := a.returned(); err != nil {
		e.t.Fatalf("ConsumeHandOver returned %v; want nil", err)
	}
	for i := 3; i < 15; i++ {
		d := b.next()
		if want := fmt.Sprintf("%s-%d", handOverPrefix, i); d.MessageID != want {
			e.t.Fatalf("after the hand-over the standby got %q; want %q (the released ones first, in order, then the rest)", d.MessageID, want)
		}
		if i < 10 && !d.Redelivered {
			e.t.Errorf("released message %q came back with Redelivered false", d.MessageID)
		}
		ack(e.t, d)
	}
	b.none()
}

func testHandOverWaits(e *env) {
	q := sacQueue(e, false)
	tr := e.client()
	a := e.consumeHandOver(tr, q, 5)
	e.publishN(tr, q, handOverPrefix, 3)
	first, second, third := a.next(), a.next(), a.next()
	a.cancel()
	a.running()
	ack(e.t, first)
	a.running()
	release(e, second)
	a.running()
	nack(e.t, third, true)
	if err := a.returned(); err != nil {
		e.t.Errorf("ConsumeHandOver returned %v after its ctx ended; want nil", err)
	}
	if err := second.Ack(); err == nil {
		e.t.Error("Ack of a released delivery succeeded; want an error")
	}
	e.eventually("2 messages ready after ConsumeHandOver returned", func() bool { return e.inspect(q).Messages == 2 })
	ids := e.drainIDs(tr, q)
	slices.Sort(ids)
	if want := []string{handOverPrefix + "-1", handOverPrefix + "-2"}; !slices.Equal(ids, want) {
		e.t.Errorf("after ConsumeHandOver returned the queue holds %q; want %q", ids, want)
	}
}

func testReleaseOnlyHandOver(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	e.publishN(tr, q, "m", 1)
	c := e.consume(tr, q, 1)
	d := c.next()
	if err := d.Release(); err == nil {
		e.t.Error("Release of a delivery from Consume succeeded; want an error")
	}
	ack(e.t, d)
}

// release releases d, failing the test on error.
func release(e *env, d transport.Delivery) {
	e.t.Helper()
	if err := d.Release(); err != nil {
		e.t.Fatalf("Release of %q: %v", d.MessageID, err)
	}
}

package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
)

// TestSubscription: a queue's Subscription is there from its Consume's
// start to its end, consuming (an in-process broker never goes away),
// since the last Consume of the queue began; a closed client has none.
func TestSubscription(t *testing.T) {
	tr := memory.NewBroker().Connect()
	defer tr.Close()
	ctx := context.Background()
	if err := tr.Declare(ctx, transport.Queue{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := tr.Subscription("q"); ok {
		t.Fatal("Subscription before any Consume reports one")
	}
	start := func() (context.CancelFunc, chan error) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- tr.Consume(cctx, "q", 1, func(transport.Delivery) {}) }()
		return cancel, done
	}
	wait := func(what string, cond func(transport.Subscription, bool) bool) transport.Subscription {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			s, ok := tr.Subscription("q")
			if cond(s, ok) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("not within 5s: %s (last %+v, %v)", what, s, ok)
			}
		}
	}
	before := time.Now()
	stop1, done1 := start()
	first := wait("the first consumer", func(s transport.Subscription, ok bool) bool { return ok })
	if !first.Consuming || first.Err != nil || first.Since.Before(before) {
		t.Errorf("Subscription = %+v; want consuming since after %v", first, before)
	}
	time.Sleep(2 * time.Millisecond)
	stop2, done2 := start()
	wait("the second consumer's start", func(s transport.Subscription, ok bool) bool { return ok && s.Since.After(first.Since) })
	stop2()
	if err := <-done2; err != nil {
		t.Fatal(err)
	}
	stop1()
	if err := <-done1; err != nil {
		t.Fatal(err)
	}
	wait("no consumer once both returned", func(_ transport.Subscription, ok bool) bool { return !ok })

	stop3, done3 := start()
	wait("a consumer again", func(_ transport.Subscription, ok bool) bool { return ok })
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	stop3()
	<-done3
	if _, ok := tr.Subscription("q"); ok {
		t.Error("a closed client reports a Subscription")
	}
}

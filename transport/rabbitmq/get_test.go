package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

func TestGet(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	q := queue(t, tr, "get", nil)
	if _, ok, err := tr.Get(ctxT(t), q); ok || err != nil {
		t.Fatalf("Get of an empty queue = %v, %v; want false, nil", ok, err)
	}
	for _, id := range []string{"a", "b"} {
		if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: id}); err != nil {
			t.Fatal(err)
		}
	}
	a, ok, err := tr.Get(ctxT(t), q)
	if err != nil || !ok || a.MessageID != "a" || a.Queue != q {
		t.Fatalf("Get = %+v, %v, %v", a, ok, err)
	}
	if err := a.Nack(true); err != nil {
		t.Fatal(err)
	}
	if err := a.Ack(); err == nil {
		t.Error("settling a Get delivery twice succeeded")
	}
	a, _, _ = tr.Get(ctxT(t), q)
	if a.MessageID != "a" || !a.Redelivered {
		t.Fatalf("after the requeue Get = %q redelivered=%v", a.MessageID, a.Redelivered)
	}
	b, _, _ := tr.Get(ctxT(t), q)
	for _, d := range []transport.Delivery{a, b} {
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := tr.Get(ctxT(t), q); ok || err != nil {
		t.Fatalf("Get after acking both = %v, %v; want false, nil", ok, err)
	}
	if _, _, err := tr.Get(ctxT(t), acemqtest.QueueName(t, "missing")); !errors.Is(err, transport.ErrNotFound) {
		t.Fatalf("Get of a missing queue = %v; want ErrNotFound", err)
	}
}

// Holding many messages taken with Get at once (a replay skipping them
// does) must not run into the broker's channel limit (2,047), and a Get on
// a missing queue must not disturb the ones held.
func TestGetHoldsManyMessages(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	q := queue(t, tr, "gethold", nil)
	const n = 2500
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: fmt.Sprint(i)}) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	held := make([]transport.Delivery, 0, n)
	for range n {
		d, ok, err := tr.Get(ctxT(t), q)
		if err != nil || !ok {
			t.Fatalf("Get %d of %d = %v, %v", len(held)+1, n, ok, err)
		}
		held = append(held, d)
	}
	if _, _, err := tr.Get(ctxT(t), acemqtest.QueueName(t, "missing")); !errors.Is(err, transport.ErrNotFound) {
		t.Fatalf("Get of a missing queue = %v; want ErrNotFound", err)
	}
	for i := len(held) - 1; i >= 0; i-- {
		if err := held[i].Nack(true); err != nil {
			t.Fatalf("putting back message %d: %v", i, err)
		}
	}
	d, ok, err := tr.Get(ctxT(t), q)
	if err != nil || !ok || d.MessageID != held[0].MessageID {
		t.Fatalf("after putting them back Get = %q, %v, %v; want %q first", d.MessageID, ok, err, held[0].MessageID)
	}
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
}

func TestRequestReply(t *testing.T) {
	t.Parallel()
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	server := dial(t, brokerURL(t), rabbitmq.Config{})
	q := queue(t, tr, "rpc", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Consume(ctx, q, 10, func(d transport.Delivery) {
			reply := transport.Message{RoutingKey: d.ReplyTo, CorrelationID: d.MessageID, Body: append([]byte("re: "), d.Body...)}
			// The reply may reach the requester before its confirm reaches
			// the server, and the test may end in between.
			if err := server.Publish(ctx, reply); err != nil && ctx.Err() == nil {
				t.Errorf("reply: %v", err)
			}
			_ = d.Ack()
		})
	}()
	defer func() { cancel(); <-done }()
	for _, id := range []string{"r1", "r2", "r3"} {
		got, err := tr.Request(ctxT(t), transport.Message{RoutingKey: q, MessageID: id, Body: []byte(id)})
		if err != nil {
			t.Fatalf("Request %s: %v", id, err)
		}
		if got.CorrelationID != id || string(got.Body) != "re: "+id {
			t.Fatalf("reply to %s = %q %q", id, got.CorrelationID, got.Body)
		}
	}
	// Nobody answers on this queue: the ctx ends the wait.
	silent := queue(t, tr, "silent", nil)
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	if _, err := tr.Request(short, transport.Message{RoutingKey: silent, MessageID: "unanswered"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered Request = %v; want DeadlineExceeded", err)
	}
	if _, err := tr.Request(ctxT(t), transport.Message{RoutingKey: acemqtest.QueueName(t, "nobody"), MessageID: "x"}); !errors.Is(err, transport.ErrUnroutable) {
		t.Fatalf("Request to no queue = %v; want ErrUnroutable", err)
	}
	if _, err := tr.Request(ctxT(t), transport.Message{RoutingKey: q}); err == nil {
		t.Fatal("Request without a MessageID succeeded")
	}
	// A missing exchange is found by its check, and the reply channel,
	// which the broker would otherwise close, serves the next request.
	missing := acemqtest.QueueName(t, "no-such-exchange")
	if _, err := tr.Request(ctxT(t), transport.Message{Exchange: missing, RoutingKey: q, MessageID: "lost"}); !errors.Is(err, transport.ErrNotFound) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Request through a missing exchange = %v; want ErrNotFound naming it", err)
	}
	if got, err := tr.Request(ctxT(t), transport.Message{RoutingKey: q, MessageID: "r4", Body: []byte("r4")}); err != nil || got.CorrelationID != "r4" {
		t.Fatalf("Request after the missing exchange = %q, %v", got.CorrelationID, err)
	}
}

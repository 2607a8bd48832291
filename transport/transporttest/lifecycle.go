package transporttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/acemq/acemq/transport"
)

// testRequestReply runs three requests at once against a responder that
// answers each with a decoy (a wrong correlation ID) and then the reply.
func testRequestReply(e *env) {
	const requests = 3
	requester, responder := e.client(), e.client()
	q := e.queue("requests", nil)
	c := e.consume(responder, q, requests)
	ctx := e.ctx()

	var wg sync.WaitGroup
	wg.Go(func() { // the responder; it reports with Errorf, never Fatalf
		for range requests {
			var d transport.Delivery
			select {
			case d = <-c.deliveries:
			case <-ctx.Done():
				e.t.Errorf("the responder got no request: %v", ctx.Err())
				return
			}
			if !strings.HasPrefix(d.ReplyTo, transport.DirectReplyTo+".") {
				e.t.Errorf("request ReplyTo = %q; want %s.<token>", d.ReplyTo, transport.DirectReplyTo)
			}
			for _, reply := range []transport.Message{
				{RoutingKey: d.ReplyTo, CorrelationID: "decoy", Body: []byte("decoy")},
				{RoutingKey: d.ReplyTo, CorrelationID: d.MessageID, Body: append([]byte("pong:"), d.Body...)},
			} {
				if err := responder.Publish(ctx, reply); err != nil {
					e.t.Errorf("publishing to reply-to %q: %v", d.ReplyTo, err)
				}
			}
			if err := d.Ack(); err != nil {
				e.t.Errorf("Ack of request %q: %v", d.MessageID, err)
			}
		}
	})

	for i := range requests {
		wg.Go(func() {
			id := fmt.Sprintf("%s-request-%d", e.prefix, i)
			body := fmt.Sprintf("ping-%d", i)
			reply, err := requester.Request(ctx, transport.Message{RoutingKey: q, MessageID: id, Body: []byte(body)})
			switch {
			case err != nil:
				e.t.Errorf("Request %d: %v", i, err)
			case reply.CorrelationID != id || string(reply.Body) != "pong:"+body:
				e.t.Errorf("Request %d got correlation %q body %q; want %q %q",
					i, reply.CorrelationID, reply.Body, id, "pong:"+body)
			}
		})
	}
	wg.Wait()
}

func testRequestContext(e *env) {
	tr := e.client()
	q := e.queue("requests", nil)
	ctx, cancel := context.WithTimeout(context.Background(), e.f.Quiet)
	defer cancel()
	start := time.Now()
	_, err := tr.Request(ctx, transport.Message{RoutingKey: q, MessageID: "unanswered"})
	if !errors.Is(err, context.DeadlineExceeded) {
		e.t.Errorf("Request nobody answers = %v; want context.DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > e.f.Quiet+e.f.Timeout/2 {
		e.t.Errorf("Request outlived its ctx (%v) by %v", e.f.Quiet, elapsed-e.f.Quiet)
	}
	d, ok, err := tr.Get(e.ctx(), q)
	switch {
	case err != nil || !ok:
		e.t.Errorf("Get of the unanswered request = %v, %v; want it in the queue", ok, err)
	case !strings.HasPrefix(d.ReplyTo, transport.DirectReplyTo+"."):
		e.t.Errorf("request ReplyTo = %q; want %s.<token>", d.ReplyTo, transport.DirectReplyTo)
	default:
		ack(e.t, d)
	}

	_, err = tr.Request(e.ctx(), transport.Message{RoutingKey: e.name("no-such-queue"), MessageID: "lost"})
	if !errors.Is(err, transport.ErrUnroutable) {
		e.t.Errorf("Request to a missing queue = %v; want ErrUnroutable", err)
	}
}

func testClose(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	if err := tr.Health(e.ctx()); err != nil {
		e.t.Fatalf("Health of an open client: %v", err)
	}
	if err := tr.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	if err := tr.Close(); err != nil && !errors.Is(err, transport.ErrClosed) {
		e.t.Errorf("second Close = %v; want nil or ErrClosed", err)
	}
	ctx := e.ctx()
	msg := transport.Message{RoutingKey: q, MessageID: "m"}
	_, _, getErr := tr.Get(ctx, q)
	_, inspectErr := tr.Inspect(ctx, q)
	_, requestErr := tr.Request(ctx, msg)
	consumeErr := make(chan error, 1)
	go func() { consumeErr <- tr.Consume(ctx, q, 1, func(d transport.Delivery) { _ = d.Ack() }) }()
	for _, call := range []struct {
		name string
		err  error
	}{
		{"Publish", tr.Publish(ctx, msg)},
		{"Consume", <-consumeErr}, // ctx bounds it if it wrongly blocks
		{"Get", getErr},
		{"Request", requestErr},
		{"Declare", tr.Declare(ctx, transport.Queue{Name: q})},
		{"Inspect", inspectErr},
		{"DeleteQueue", tr.DeleteQueue(ctx, q)},
		{"DeleteExchange", tr.DeleteExchange(ctx, e.name("x"))},
		{"Health", tr.Health(ctx)},
	} {
		if !errors.Is(call.err, transport.ErrClosed) {
			e.t.Errorf("%s after Close = %v; want ErrClosed", call.name, call.err)
		}
	}
	if info := e.inspect(q); info.Messages != 0 {
		e.t.Errorf("a publish after Close reached the queue")
	}
}

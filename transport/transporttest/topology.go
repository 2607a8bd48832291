package transporttest

import (
	"errors"
	"slices"
	"strings"

	"github.com/acemq/acemq/transport"
)

func testDeclareIdempotent(e *env) {
	tr := e.client()
	args := map[string]any{
		"x-message-ttl":             int64(60000),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": e.name("elsewhere"),
	}
	q := e.queue("q", args)
	ex := e.name("x")
	e.deleteExchangeAfter(ex)
	topology := []transport.Topology{
		transport.Queue{Name: q, Args: args},
		transport.Exchange{Name: ex, Kind: "topic"},
		transport.Binding{Exchange: ex, Key: "a.#", Queue: q},
	}
	for i := range 3 { // the first creates the exchange and binding
		if err := tr.Declare(e.ctx(), topology...); err != nil {
			e.t.Fatalf("Declare, round %d: %v", i+1, err)
		}
	}
	e.publish(tr, transport.Message{Exchange: ex, RoutingKey: "a.b", MessageID: "once"})
	if ids := e.drainIDs(tr, q); !slices.Equal(ids, []string{"once"}) {
		e.t.Errorf("after binding three times the queue took %q; want one copy", ids)
	}
}

// wantConflict fails the test unless err wraps ErrTopologyConflict and names
// what conflicted.
func wantConflict(e *env, what string, err error, name string) {
	e.t.Helper()
	switch {
	case !errors.Is(err, transport.ErrTopologyConflict):
		e.t.Errorf("%s = %v; want ErrTopologyConflict", what, err)
	case !strings.Contains(err.Error(), name):
		e.t.Errorf("%s = %q; want the error to name %q", what, err, name)
	}
}

func testDeclareConflict(e *env) {
	tr := e.client()
	q := e.queue("q", map[string]any{"x-message-ttl": int64(1000)})
	err := tr.Declare(e.ctx(), transport.Queue{Name: q, Args: map[string]any{"x-message-ttl": int64(2000)}})
	wantConflict(e, "redeclaring a queue with another TTL", err, q)
	err = tr.Declare(e.ctx(), transport.Queue{Name: q})
	wantConflict(e, "redeclaring a queue without its TTL", err, q)

	ex := e.exchange("x", "direct")
	err = tr.Declare(e.ctx(), transport.Exchange{Name: ex, Kind: "fanout"})
	wantConflict(e, "redeclaring a direct exchange as fanout", err, ex)

	// The client must still work, and the originals stand.
	if err := tr.Declare(e.ctx(), transport.Queue{Name: q, Args: map[string]any{"x-message-ttl": int64(1000)}}); err != nil {
		e.t.Errorf("redeclaring the queue as it is, after a conflict: %v", err)
	}
	e.publish(tr, transport.Message{RoutingKey: q, MessageID: "after"})
	if ids := e.drainIDs(tr, q); !slices.Equal(ids, []string{"after"}) {
		e.t.Errorf("queue holds %q; want the message published after the conflicts", ids)
	}
}

func testDeclareMissing(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	missingEx := e.name("no-such-exchange")
	err := tr.Declare(e.ctx(), transport.Binding{Exchange: missingEx, Key: "k", Queue: q})
	if !errors.Is(err, transport.ErrNotFound) {
		e.t.Errorf("binding from missing exchange %q = %v; want ErrNotFound", missingEx, err)
	}
	missingQ := e.name("no-such-queue")
	err = tr.Declare(e.ctx(), transport.Binding{Exchange: "amq.direct", Key: "k", Queue: missingQ})
	if !errors.Is(err, transport.ErrNotFound) {
		e.t.Errorf("binding missing queue %q = %v; want ErrNotFound", missingQ, err)
	}
	if _, err := tr.Inspect(e.ctx(), missingQ); !errors.Is(err, transport.ErrNotFound) {
		e.t.Errorf("Inspect of missing queue %q = %v; want ErrNotFound", missingQ, err)
	}
	if _, _, err := tr.Get(e.ctx(), missingQ); !errors.Is(err, transport.ErrNotFound) {
		e.t.Errorf("Get from missing queue %q = %v; want ErrNotFound", missingQ, err)
	}
	if err := tr.Health(e.ctx()); err != nil {
		e.t.Errorf("Health after failed declarations: %v", err)
	}
}

func testInspect(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	if info := e.inspect(q); info != (transport.QueueInfo{Name: q}) {
		e.t.Errorf("Inspect of a new queue = %+v; want %+v", info, transport.QueueInfo{Name: q})
	}
	e.publishN(tr, q, "m", 3)
	if info := e.inspect(q); info.Messages != 3 || info.Consumers != 0 {
		e.t.Errorf("Inspect after 3 publishes = %+v; want 3 messages, 0 consumers", info)
	}
	c := e.consume(tr, q, 1)
	d := c.next()
	e.eventually("Inspect to report 1 consumer and 2 ready", func() bool {
		info := e.inspect(q)
		return info.Consumers == 1 && info.Messages == 2
	})
	ack(e.t, d)
	ack(e.t, c.next())
	ack(e.t, c.next())
	c.cancel()
	if err := c.returned(); err != nil {
		e.t.Errorf("Consume returned %v after its ctx ended; want nil", err)
	}
	e.eventually("Inspect to report 0 consumers and 0 ready", func() bool {
		return e.inspect(q) == transport.QueueInfo{Name: q}
	})
}

func testDeleteQueue(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	e.publishN(tr, q, "m", 2)
	if err := tr.DeleteQueue(e.ctx(), q); err != nil {
		e.t.Fatalf("DeleteQueue(%q): %v", q, err)
	}
	if _, err := tr.Inspect(e.ctx(), q); !errors.Is(err, transport.ErrNotFound) {
		e.t.Errorf("Inspect of a deleted queue = %v; want ErrNotFound", err)
	}
	if err := tr.DeleteQueue(e.ctx(), q); err != nil {
		e.t.Errorf("deleting a deleted queue = %v; want nil", err)
	}
	err := tr.Publish(e.ctx(), transport.Message{RoutingKey: q, Body: []byte("x")})
	if !errors.Is(err, transport.ErrUnroutable) {
		e.t.Errorf("Publish to a deleted queue = %v; want ErrUnroutable", err)
	}
	// Declared again, it starts empty.
	e.declare(transport.Queue{Name: q})
	if info := e.inspect(q); info.Messages != 0 {
		e.t.Errorf("a queue declared again after deletion holds %d messages", info.Messages)
	}
}

// DeleteExchange takes the exchange's bindings with it and leaves their
// queues and messages; deleting a missing exchange is not an error, and the
// predeclared ones cannot be deleted.
func testDeleteExchange(e *env) {
	tr := e.client()
	x := e.exchange("x", "direct")
	q := e.queue("q", nil)
	e.declare(transport.Binding{Exchange: x, Key: "k", Queue: q})
	e.publish(tr, transport.Message{Exchange: x, RoutingKey: "k", MessageID: "before"})
	if err := tr.DeleteExchange(e.ctx(), x); err != nil {
		e.t.Fatalf("DeleteExchange(%q): %v", x, err)
	}
	err := tr.Publish(e.ctx(), transport.Message{Exchange: x, RoutingKey: "k", Body: []byte("x")})
	if !errors.Is(err, transport.ErrNotFound) {
		e.t.Errorf("Publish to a deleted exchange = %v; want ErrNotFound", err)
	}
	if err := tr.DeleteExchange(e.ctx(), x); err != nil {
		e.t.Errorf("deleting a deleted exchange = %v; want nil", err)
	}
	if ids := e.drainIDs(tr, q); !slices.Equal(ids, []string{"before"}) {
		e.t.Errorf("the bound queue holds %q after its exchange was deleted; want the message routed before", ids)
	}
	// Declared again, the exchange has no bindings: the old one went with it.
	e.declare(transport.Exchange{Name: x, Kind: "direct"})
	err = tr.Publish(e.ctx(), transport.Message{Exchange: x, RoutingKey: "k", Body: []byte("x")})
	if !errors.Is(err, transport.ErrUnroutable) {
		e.t.Errorf("Publish through a binding of the deleted exchange = %v; want ErrUnroutable", err)
	}
	if err := tr.DeleteExchange(e.ctx(), "amq.direct"); err == nil {
		e.t.Errorf("DeleteExchange(amq.direct) succeeded; want an error")
	}
	// The client still works after the refusal.
	e.publish(tr, transport.Message{RoutingKey: q, MessageID: "after"})
	if ids := e.drainIDs(tr, q); !slices.Equal(ids, []string{"after"}) {
		e.t.Errorf("queue holds %q; want the message published after the refusal", ids)
	}
}

func testQuorumDeliveryLimit(e *env) {
	const limit = 2
	tr := e.client()
	dlq := e.queue("dlq", nil)
	args := map[string]any{
		"x-delivery-limit":          int64(limit),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": dlq,
	}
	q := e.declareQueue(transport.Queue{Name: e.name("q"), Quorum: true, Args: args})
	err := tr.Declare(e.ctx(), transport.Queue{Name: q, Args: args})
	wantConflict(e, "redeclaring a quorum queue as classic", err, q)

	e.publish(tr, transport.Message{RoutingKey: q, MessageID: "m", Body: []byte("body")})
	// Returned more often than the limit: dead-lettered. Each taker closes
	// holding the message, as a consumer process that dies does, which
	// every RabbitMQ counts (4.x does not count a nack with requeue).
	for i := range limit + 1 {
		taker := e.client()
		c := e.consume(taker, q, 1)
		d := c.next()
		if d.Redelivered != (i > 0) {
			e.t.Errorf("delivery %d: Redelivered %v", i+1, d.Redelivered)
		}
		if err := taker.Close(); err != nil {
			e.t.Fatalf("Close: %v", err)
		}
		c.returned()
	}
	e.consume(tr, q, 1).none()
	d := e.consume(tr, dlq, 1).next()
	if d.MessageID != "m" || string(d.Body) != "body" {
		e.t.Errorf("dead letter is %q body %q; want %q body %q", d.MessageID, d.Body, "m", "body")
	}
	ack(e.t, d)
}

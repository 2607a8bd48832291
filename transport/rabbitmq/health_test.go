package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// TestHealthDuringAndAfterOutage takes the broker away from one transport
// (through a proxy, so other tests keep theirs) and checks Health reports
// the connection and the consumer down, without the password, and then
// recovers by itself.
func TestHealthDuringAndAfterOutage(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	p := newProxy(t, hostOf(t, url))
	tr := dial(t, withHost(t, url, p.addr), rabbitmq.Config{})
	q := queue(t, tr, "health", nil)
	c := consume(t, tr, q, 10)
	eventually(t, 5*time.Second, "healthy with a consumer", func() bool { return tr.Health(ctxT(t)) == nil })
	if _, ok := tr.Subscription("no-such-consumer"); ok {
		t.Error("Subscription of a queue nobody consumes reports one")
	}
	var up transport.Subscription
	eventually(t, 5*time.Second, "Subscription to say the consumer consumes", func() bool {
		var ok bool
		up, ok = tr.Subscription(q)
		return ok && up.Consuming && up.Err == nil && !up.Since.IsZero()
	})
	if err := tr.Health(ctxT(t)); err != nil {
		t.Fatalf("Health = %v while Subscription says consuming", err)
	}

	p.stop()
	var report string
	eventually(t, 5*time.Second, "Health reports the connection and consumer down after attempts", func() bool {
		err := tr.Health(ctxT(t))
		if err == nil {
			return false
		}
		report = err.Error()
		return strings.Contains(report, "connection to") && strings.Contains(report, "down since") &&
			!strings.Contains(report, "(0 attempts") && strings.Contains(report, "attempt") && strings.Contains(report, `consumer on "`+q+`" not consuming since`)
	})
	t.Logf("Health during the outage: %s", report)
	// The same truth per queue: not consuming, in Health's words.
	if down, ok := tr.Subscription(q); !ok || down.Consuming || down.Err == nil || !down.Since.After(up.Since) ||
		!strings.Contains(report, down.Err.Error()) {
		t.Errorf("Subscription during the outage = %+v, %v; want not consuming since the loss, as Health says", down, ok)
	}
	if strings.Contains(report, ":guest@") {
		t.Errorf("Health shows the password: %s", report)
	}
	p.start()
	eventually(t, 10*time.Second, "Health is nil again", func() bool { return tr.Health(ctxT(t)) == nil })
	if back, ok := tr.Subscription(q); !ok || !back.Consuming || !back.Since.After(up.Since) {
		t.Errorf("Subscription after the outage = %+v, %v; want consuming since it resumed", back, ok)
	}
	if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: "after"}); err != nil {
		t.Fatal(err)
	}
	if d := c.next(t); d.MessageID != "after" {
		t.Fatalf("the resumed consumer got %q", d.MessageID)
	} else if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
}

func TestCloseIsIdempotentAndFinal(t *testing.T) {
	t.Parallel()
	tr, err := rabbitmq.Dial(ctxT(t), brokerURL(t), rabbitmq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("second Close = %v; want nil", err)
	}
	ctx := context.Background()
	calls := map[string]error{
		"Publish":     tr.Publish(ctx, transport.Message{RoutingKey: "q"}),
		"Consume":     tr.Consume(ctx, "q", 1, func(transport.Delivery) {}),
		"Declare":     tr.Declare(ctx, transport.Queue{Name: "q"}),
		"Health":      tr.Health(ctx),
		"DeleteQueue": tr.DeleteQueue(ctx, "q"),
	}
	_, _, calls["Get"] = tr.Get(ctx, "q")
	_, calls["Inspect"] = tr.Inspect(ctx, "q")
	_, calls["Request"] = tr.Request(ctx, transport.Message{RoutingKey: "q", MessageID: "m"})
	for name, err := range calls {
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("%s after Close = %v; want ErrClosed", name, err)
		}
	}
}

func TestCloseFailsWaitingPublishes(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	p := newProxy(t, hostOf(t, url))
	tr, err := rabbitmq.Dial(ctxT(t), withHost(t, url, p.addr), rabbitmq.Config{MinBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p.stop()
	eventually(t, 5*time.Second, "down", func() bool { return tr.Health(ctxT(t)) != nil })
	done := make(chan error, 1)
	go func() { done <- tr.Publish(context.Background(), transport.Message{RoutingKey: "q"}) }()
	time.Sleep(100 * time.Millisecond)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("a publish waiting through Close = %v; want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close left a publish waiting")
	}
}

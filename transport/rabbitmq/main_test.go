package rabbitmq_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// dial opens a transport on url with short backoffs, closed when t ends.
func dial(t testing.TB, rawURL string, cfg rabbitmq.Config) *rabbitmq.Transport {
	t.Helper()
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 20 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 200 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := rabbitmq.Dial(ctx, rawURL, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tr
}

// brokerURL is the shared broker, or a skip.
func brokerURL(t testing.TB) string {
	t.Helper()
	return acemqtest.RabbitMQ(t)
}

// queue declares a queue unique to t on tr, deleted when t ends.
func queue(t testing.TB, tr transport.Transport, base string, args map[string]any) string {
	t.Helper()
	name := acemqtest.QueueName(t, base)
	if err := tr.Declare(ctxT(t), transport.Queue{Name: name, Args: args}); err != nil {
		t.Fatalf("Declare queue: %v", err)
	}
	acemqtest.DeleteQueuesAfter(t, brokerURL(t), name)
	return name
}

// ctxT is a context ending with t or after 20 s.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// withHost returns rawURL pointing at addr instead of its own host.
func withHost(t testing.TB, rawURL, addr string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// eventually polls cond every 20 ms for up to d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// consumer runs Consume in a goroutine, delivering to a channel.
type consumer struct {
	deliveries chan transport.Delivery
	cancel     context.CancelFunc
	done       chan error
}

func consume(t testing.TB, tr transport.Transport, q string, prefetch int) *consumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &consumer{deliveries: make(chan transport.Delivery, 100000), cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- tr.Consume(ctx, q, prefetch, func(d transport.Delivery) { c.deliveries <- d }) }()
	t.Cleanup(func() {
		cancel()
		for {
			select {
			case d := <-c.deliveries:
				_ = d.Nack(true)
			case <-c.done:
				return
			case <-time.After(15 * time.Second):
				t.Errorf("Consume on %q did not return", q)
				return
			}
		}
	})
	return c
}

func (c *consumer) next(t testing.TB) transport.Delivery {
	t.Helper()
	select {
	case d := <-c.deliveries:
		return d
	case <-time.After(15 * time.Second):
		t.Fatal("no delivery within 15s")
		return transport.Delivery{}
	}
}

// hostOf returns rawURL's host:port.
func hostOf(t testing.TB, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

package transporttest

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
)

// consumption is a Consume running on its own goroutine. Its callback only
// forwards deliveries to a channel, so the test settles them itself, as the
// engine's workers do.
type consumption struct {
	e          *env
	tr         transport.Transport
	queue      string
	deliveries chan transport.Delivery
	cancel     context.CancelFunc
	done       chan struct{}
	err        error // what Consume returned; read after done is closed
}

// consume starts consuming queue with tr. When the test ends it cancels the
// Consume, acks whatever reaches the callback after that, closes tr if the
// Consume still has not returned after Timeout, and waits for it.
func (e *env) consume(tr transport.Transport, queue string, prefetch int) *consumption {
	e.t.Helper()
	return e.startConsume(tr, queue, prefetch, tr.Consume)
}

// consumeHandOver is consume with ConsumeHandOver; the test is skipped when
// tr is not a transport.HandOverConsumer.
func (e *env) consumeHandOver(tr transport.Transport, queue string, prefetch int) *consumption {
	e.t.Helper()
	h, ok := tr.(transport.HandOverConsumer)
	if !ok {
		e.t.Skipf("%T is not a transport.HandOverConsumer", tr)
	}
	return e.startConsume(tr, queue, prefetch, h.ConsumeHandOver)
}

// startConsume runs consume (tr's Consume or ConsumeHandOver) as consume
// describes.
func (e *env) startConsume(tr transport.Transport, queue string, prefetch int, consume func(context.Context, string, int, func(transport.Delivery)) error) *consumption {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &consumption{
		e:          e,
		tr:         tr,
		queue:      queue,
		deliveries: make(chan transport.Delivery, 1024),
		cancel:     cancel,
		done:       make(chan struct{}),
	}
	go func() {
		defer close(c.done)
		c.err = consume(ctx, queue, prefetch, func(d transport.Delivery) { c.deliveries <- d })
	}()
	e.t.Cleanup(c.shutdown)
	return c
}

// shutdown ends the Consume whatever state the test left it in.
func (c *consumption) shutdown() {
	c.cancel()
	timer := time.NewTimer(c.e.f.Timeout)
	defer timer.Stop()
	closed := false
	for {
		select {
		case d := <-c.deliveries:
			_ = d.Ack() // the test is over; it may fail if tr is closed
		case <-c.done:
			return
		case <-timer.C:
			if closed {
				c.e.t.Errorf("Consume(%q) did not return after its ctx ended and its client closed", c.queue)
				return
			}
			_ = c.tr.Close() // its error, if any, is reported by the client's cleanup
			closed = true
			timer.Reset(c.e.f.Timeout)
		}
	}
}

// next returns the next delivery, failing the test if none comes within
// Timeout.
func (c *consumption) next() transport.Delivery {
	c.e.t.Helper()
	select {
	case d := <-c.deliveries:
		return d
	case <-c.done:
		c.e.t.Fatalf("Consume(%q) returned %v while a delivery was awaited", c.queue, c.err)
	case <-time.After(c.e.f.Timeout):
		c.e.t.Fatalf("no delivery from %q within %v", c.queue, c.e.f.Timeout)
	}
	return transport.Delivery{}
}

// none fails the test if a delivery comes within Quiet.
func (c *consumption) none() {
	c.e.t.Helper()
	select {
	case d := <-c.deliveries:
		c.e.t.Fatalf("unexpected delivery from %q: message %q (redelivered %v)", c.queue, d.MessageID, d.Redelivered)
	case <-time.After(c.e.f.Quiet):
	}
}

// running fails the test if Consume returns within Quiet.
func (c *consumption) running() {
	c.e.t.Helper()
	select {
	case <-c.done:
		c.e.t.Fatalf("Consume(%q) returned %v while deliveries it handed out were unsettled", c.queue, c.err)
	case <-time.After(c.e.f.Quiet):
	}
}

// returned waits up to Timeout for Consume to return and gives its error.
func (c *consumption) returned() error {
	c.e.t.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(c.e.f.Timeout):
		c.e.t.Fatalf("Consume(%q) did not return within %v", c.queue, c.e.f.Timeout)
	}
	return nil
}

// ack acks d, failing the test on error.
func ack(t *testing.T, d transport.Delivery) {
	t.Helper()
	if err := d.Ack(); err != nil {
		t.Fatalf("Ack of %q: %v", d.MessageID, err)
	}
}

// nack nacks d, failing the test on error.
func nack(t *testing.T, d transport.Delivery, requeue bool) {
	t.Helper()
	if err := d.Nack(requeue); err != nil {
		t.Fatalf("Nack(requeue=%v) of %q: %v", requeue, d.MessageID, err)
	}
}

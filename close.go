package acemq

import (
	"context"
	"fmt"
	"sync"
)

// ending is an engine's end: whether Close was called, and what stops the
// Run that runs. Guarded by mu.
type ending struct {
	mu      sync.Mutex
	closed  bool
	stop    context.CancelFunc // ends the running Run's ctx; nil when none runs
	stopped chan struct{}      // closed once that Run has returned
}

// beginRun is the start of a Run: it returns the ctx the Run runs with,
// which Close ends, and the function the Run calls once it is done; or,
// once Close was called, the error every later Run returns.
func (e *engine) beginRun(ctx context.Context) (context.Context, func(), error) {
	n := &e.end
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, nil, &closedError{who: e.who, queue: e.queue}
	}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	n.stop, n.stopped = cancel, stopped
	return ctx, func() {
		n.mu.Lock()
		n.stop, n.stopped = nil, nil
		n.mu.Unlock()
		cancel()
		close(stopped)
	}, nil
}

// closed reports whether Close was called.
func (e *engine) closed() bool {
	n := &e.end
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// close is Close: it takes the engine out of its Conn's lists at once,
// then stops its Run, if one runs, as the end of Run's ctx does, and waits
// for it to return. Only the first call does anything.
func (e *engine) close() error {
	n := &e.end
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	stop, stopped := n.stop, n.stopped
	n.mu.Unlock()
	e.conn.unregister(e)
	if stop != nil {
		stop()
		<-stopped
	}
	e.conn.cfg.logger.Info("acemq: the consumer was closed by Close", "who", e.who, "queue", e.queue)
	return nil
}

// Close stops the consumer for good and takes it off its Conn. A Run that
// runs stops as when its ctx ends: the consumer takes no more deliveries,
// the ones its handlers hold settle, the prefetched ones go back to the
// queue (an ordered consumer hands its partitions over), and that Run
// returns nil; Close returns once it has. The consumer leaves
// Conn.HealthReport and every list the Conn keeps, so Health no longer
// counts it (a consumer closed on purpose is not ErrNotRunning), and no
// goroutine of it is left. A later Run fails with an error wrapping
// ErrConsumerClosed; Topology still lists its queues, for Conn.Delete.
//
// Close is idempotent and safe from any goroutine but the consumer's own
// handlers: it waits for them, as Run does. It does not end their
// contexts; Conn.Close does. Its error is always nil today; it is there so
// that a Consumer is an io.Closer. Close on a nil Consumer does nothing.
func (c *Consumer[T]) Close() error {
	if c == nil {
		return nil
	}
	return c.e.close()
}

// Close stops the router for good and takes it off its Conn, as
// Consumer.Close does for a consumer. It is safe on a Router that NewRouter
// could not make (its error shows at Run), and on a nil one.
func (r *Router) Close() error {
	if r == nil || r.e == nil {
		return nil
	}
	return r.e.close()
}

// closedError is what Run returns after Close.
type closedError struct{ who, queue string }

func (e *closedError) Error() string {
	return fmt.Sprintf("acemq: %s of %q was closed with Close; a closed consumer does not run again (make a new one)", e.who, e.queue)
}
func (e *closedError) Unwrap() error { return ErrConsumerClosed }

package transporttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
)

// env is one subtest's view of the broker: a client for setup and cleanup,
// unique names, and helpers that fail the test on an unexpected error.
type env struct {
	t            *testing.T
	f            Features
	newTransport func(t *testing.T) transport.Transport
	admin        transport.Transport
	prefix       string
}

func newEnv(t *testing.T, newTransport func(t *testing.T) transport.Transport, f Features) *env {
	e := &env{t: t, f: f, newTransport: newTransport}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("transporttest: reading random bytes: %v", err)
	}
	sub := t.Name()
	if i := strings.LastIndexByte(sub, '/'); i >= 0 {
		sub = sub[i+1:]
	}
	e.prefix = "tt." + sub + "." + hex.EncodeToString(b[:])
	e.admin = e.client() // closed last, after the queues are deleted
	return e
}

// client opens a client on the broker under test, closed when the test ends.
func (e *env) client() transport.Transport {
	e.t.Helper()
	tr := e.newTransport(e.t)
	if tr == nil {
		e.t.Fatal("transporttest: newTransport returned nil")
	}
	e.t.Cleanup(func() {
		if err := tr.Close(); err != nil && !errors.Is(err, transport.ErrClosed) {
			e.t.Errorf("Close: %v", err)
		}
	})
	return tr
}

// ctx returns a context bounded by the Timeout feature.
func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), e.f.Timeout)
	e.t.Cleanup(cancel)
	return ctx
}

// name returns a name unique to this subtest.
func (e *env) name(base string) string { return e.prefix + "." + base }

// queue declares a queue unique to this subtest, deleted when it ends.
func (e *env) queue(base string, args map[string]any) string {
	e.t.Helper()
	return e.declareQueue(transport.Queue{Name: e.name(base), Args: args})
}

// declareQueue declares q, deleted when the test ends.
func (e *env) declareQueue(q transport.Queue) string {
	e.t.Helper()
	e.declare(q)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e.f.Timeout)
		defer cancel()
		if err := e.admin.DeleteQueue(ctx, q.Name); err != nil {
			e.t.Errorf("DeleteQueue(%q): %v", q.Name, err)
		}
	})
	return q.Name
}

// exchange declares an exchange of kind unique to this subtest, deleted
// when it ends.
func (e *env) exchange(base, kind string) string {
	e.t.Helper()
	return e.declareExchange(transport.Exchange{Name: e.name(base), Kind: kind})
}

// declareExchange declares x, deleted when the test ends.
func (e *env) declareExchange(x transport.Exchange) string {
	e.t.Helper()
	e.declare(x)
	e.deleteExchangeAfter(x.Name)
	return x.Name
}

// deleteExchangeAfter deletes the exchange name when the test ends.
func (e *env) deleteExchangeAfter(name string) {
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e.f.Timeout)
		defer cancel()
		if err := e.admin.DeleteExchange(ctx, name); err != nil {
			e.t.Errorf("DeleteExchange(%q): %v", name, err)
		}
	})
}

// declare declares topology, failing the test on error.
func (e *env) declare(topology ...transport.Topology) {
	e.t.Helper()
	if err := e.admin.Declare(e.ctx(), topology...); err != nil {
		e.t.Fatalf("Declare(%+v): %v", topology, err)
	}
}

// publish publishes m with tr, failing the test unless it is confirmed.
func (e *env) publish(tr transport.Transport, m transport.Message) {
	e.t.Helper()
	if err := tr.Publish(e.ctx(), m); err != nil {
		e.t.Fatalf("Publish to exchange %q key %q: %v", m.Exchange, m.RoutingKey, err)
	}
}

// publishN publishes n messages to queue through the default exchange, with
// message IDs "<prefix>-<i>" and bodies "<i>".
func (e *env) publishN(tr transport.Transport, queue, prefix string, n int) {
	e.t.Helper()
	for i := range n {
		e.publish(tr, transport.Message{
			RoutingKey: queue,
			MessageID:  fmt.Sprintf("%s-%d", prefix, i),
			Body:       fmt.Appendf(nil, "%d", i),
		})
	}
}

// inspect returns queue's info, failing the test on error.
func (e *env) inspect(queue string) transport.QueueInfo {
	e.t.Helper()
	info, err := e.admin.Inspect(e.ctx(), queue)
	if err != nil {
		e.t.Fatalf("Inspect(%q): %v", queue, err)
	}
	return info
}

// eventually polls cond every 10ms until it holds or Timeout passes, then
// fails the test with what.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(e.f.Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("after %v: %s", e.f.Timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// drainIDs takes every message from queue with Get, acking each, and returns
// their message IDs in order.
func (e *env) drainIDs(tr transport.Transport, queue string) []string {
	e.t.Helper()
	var ids []string
	for {
		d, ok, err := tr.Get(e.ctx(), queue)
		if err != nil {
			e.t.Fatalf("Get(%q): %v", queue, err)
		}
		if !ok {
			return ids
		}
		ids = append(ids, d.MessageID)
		if err := d.Ack(); err != nil {
			e.t.Fatalf("Ack of a Get from %q: %v", queue, err)
		}
	}
}

// sleepQuiet waits Quiet, for something the test cannot observe to reach
// the broker (a standby's subscription to a quorum queue, whose consumer
// count shows only the active one).
func (e *env) sleepQuiet() { time.Sleep(e.f.Quiet) }

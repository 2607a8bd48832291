package acemqtest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/acemq/acemq"
)

// Declared is what DeleteAfter deletes: an *acemq.Consumer or an
// *acemq.Router lists what it declared (its queue, the ladder's queues with
// the tiers of its own retry policy, its exchanges and bindings; an
// ordered one's exchange, partitions and the queues beside them, through
// which Conn.Delete also finds the held and re-run queues of the keys it
// blocked), and Declarations lists what a test declared itself. A Router
// whose options were invalid lists nothing.
type Declared interface {
	Topology() []acemq.Topology
}

// Declarations is a Declared made of the exchanges, queues and bindings a
// test declared with Conn.Declare.
type Declarations []acemq.Topology

// Topology returns d.
func (d Declarations) Topology() []acemq.Topology { return d }

// DeleteAfter registers a cleanup that deletes, on the broker at rawURL,
// everything each of declared lists, with Conn.Delete on a Conn of its own
// (so the test's Conns may be closed by then): queues with their messages,
// exchanges with their bindings. Each list is read when the test ends.
// Cleanups run last-registered first: call DeleteAfter before starting the
// consumer whose queues it deletes, so that the consumer has stopped by
// then (or Close it in the test), or it would declare them again. It
// works on memory:// URLs too. A failure is reported with t.Errorf.
//
//	orders, err := acemq.NewConsumer(mq, queue, handle, acemq.WithRetryPolicy(fast))
//	...
//	acemqtest.DeleteAfter(t, url, orders)
func DeleteAfter(t testing.TB, rawURL string, declared ...Declared) {
	t.Helper()
	if len(declared) == 0 {
		return
	}
	t.Cleanup(func() {
		var all []acemq.Topology
		for _, d := range declared {
			if d != nil {
				all = append(all, d.Topology()...)
			}
		}
		if len(all) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		mq, err := acemq.Connect(ctx, rawURL, acemq.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Errorf("acemqtest: deleting what the test declared: %v", err)
			return
		}
		defer mq.Close()
		if err := mq.Delete(ctx, all...); err != nil {
			t.Errorf("acemqtest: deleting what the test declared on %s: %v", acemq.Redact(rawURL), err)
		}
	})
}

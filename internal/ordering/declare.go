// Declaring an ordered queue while other instances may be declaring it too
// (SPEC §16, simultaneous starts).
//
// Before it declares, an ordered consumer checks that the broker has no
// other partition count for its queue: the partition queues that exist say
// which count was declared. Declaring them is no single step, though; the
// transport declares {queue}.p0, .p1, … one after another, so an instance
// that looks while another one is halfway through sees a count that nobody
// asked for and refuses to start ("declared with 5"). Two instances asking
// for different counts at the same moment could also both find nothing and
// both declare, and the conflict would go unnoticed.
//
// So the check and the declaration run under one lease, {queue}.declare
// (DeclareLease): an exclusive queue on RabbitMQ, which the broker refuses
// to every other connection while it lives and deletes with the connection
// that holds it. Instances started together take it one at a time: the
// first finds nothing and declares its count, each later one finds the
// whole of it and either agrees (declaring again changes nothing) or is
// refused with the count the broker has. A holder that dies frees the
// lease with its connection, so nobody waits for it for longer than the
// broker takes to notice.
//
// The lease serializes declarations only while its holder's connection
// lives: if the connection drops in the middle, another instance may take
// the lease and look while the transport, reconnected, declares the rest;
// that instance may then be refused, and starts when it is tried again.

package ordering

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/acemq/acemq/transport"
)

// DeclareLease is the lease an ordered queue is checked and declared
// under: "orders.declare".
func DeclareLease(queue string) string { return queue + ".declare" }

// DeclareLock is the lease DeclareLease(queue), held while an instance
// checks what the broker has of the queue and declares it.
type DeclareLock struct {
	b     Broker
	queue string
	lease transport.Lease // nil without a Leaser
}

// LockDeclare takes the lease DeclareLease(queue) on b, waiting, with a
// short jittered backoff, while another connection holds it, until ctx
// ends; then it fails naming the queue and the lease. A wait longer than
// lockPatience is logged once. Without a Leaser it holds nothing and the
// check and the declaration run unguarded, as they do on a transport that
// cannot hold leases (an ordered consumer refuses such a transport before
// it gets here). Each try is bounded by lockTry, so a broker in trouble
// cannot hold one try until ctx ends.
func LockDeclare(ctx context.Context, b Broker, queue string) (*DeclareLock, error) {
	l := &DeclareLock{b: b, queue: queue}
	if b.Leaser == nil {
		return l, nil
	}
	name := DeclareLease(queue)
	start, warned := time.Now(), false
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, maxDeclarePause) {
		tctx, cancel := context.WithTimeout(ctx, lockTry)
		lease, err := b.Leaser.Lease(tctx, name)
		cancel()
		if err == nil {
			l.lease = lease
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("waiting %v for the lease %q, which another connection holds while it declares the partitions of %q: %w",
				time.Since(start).Round(time.Millisecond), name, queue, ctx.Err())
		}
		if !errors.Is(err, transport.ErrLocked) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("taking the lease %q to declare the partitions of %q: %w", name, queue, err)
		}
		if !warned && time.Since(start) > lockPatience {
			warned = true
			b.logger().Warn("waiting for the lease another instance holds while it declares the ordered queue",
				"queue", queue, "lease", name, "for", time.Since(start).Round(time.Millisecond), "error", err)
		}
		Sleep(ctx, pause/2+rand.N(pause))
	}
}

// maxDeclarePause is the longest pause between two tries of LockDeclare:
// a holder declares for tens of milliseconds on one broker, some hundreds
// on a cluster with quorum queues.
const maxDeclarePause = 200 * time.Millisecond

// Unlock gives the lease up. A Release that fails leaves the lease's queue
// to this connection, keeping every other instance out until the
// connection ends, so it is taken again (a connection may take its own) and
// released again, a few times, and then logged; once another connection
// holds it, this one does not. It ignores ctx's end: an
// instance whose NewConsumer gave up must still let the others in.
func (l *DeclareLock) Unlock(ctx context.Context) {
	if l.lease == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	name := DeclareLease(l.queue)
	tctx, cancel := context.WithTimeout(ctx, lockTry)
	err := l.lease.Release(tctx)
	cancel()
	for try := 1; err != nil && try <= 4; try++ {
		Sleep(ctx, time.Duration(try)*100*time.Millisecond)
		tctx, cancel := context.WithTimeout(ctx, lockTry)
		var again transport.Lease
		switch again, err = l.b.Leaser.Lease(tctx, name); {
		case err == nil:
			err = again.Release(tctx)
		case errors.Is(err, transport.ErrLocked):
			err = nil // another connection holds it: this one no longer does
		}
		cancel()
	}
	if err != nil {
		l.b.logger().Warn("releasing the lease of declaring the ordered queue failed; other instances wait to declare it until this connection ends",
			"queue", l.queue, "lease", name, "error", err)
	}
}

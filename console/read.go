package console

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq/transport"
)

// maxBrowse bounds the messages one read of a queue holds: each is held
// unacked, body and all, until the read puts them all back.
const maxBrowse = 20000

// readIdle is how long a read waits for the next message before it takes
// the queue to hold fewer than its count said (others took some meanwhile).
const readIdle = time.Second

// settleWait bounds how long a read waits, after putting its messages back,
// for the broker's count to show them again: a quorum queue counts a
// return once its log has applied it.
const settleWait = 2 * time.Second

// reading is one read of a queue in progress: the messages it holds,
// unacked, in queue order.
type reading struct {
	held   []transport.Delivery
	capped bool                    // the queue held more than maxBrowse
	got    chan transport.Delivery // what the consumer handed out
	ended  chan error
	stop   context.CancelFunc
	// finished is set once the consumer has ended and been waited for.
	finished bool
}

// read takes the ready messages of queue, at most maxBrowse, in queue order,
// on a consumer of its own whose prefetch is their count: one pass with no
// round trip per message, and none taken that the read does not hold. The
// consumer is stopped when read returns; the caller settles every held
// message (most are put back with Nack(true)), then calls end. On RabbitMQ
// a classic queue puts a returned message back where it was; a quorum
// queue (3.10 and later) puts it behind the ready ones, so a read keeps a
// quorum queue's order only when it holds the whole queue (not capped).
func (c *console) read(ctx context.Context, queue string, count int) (*reading, error) {
	limit := min(count, maxBrowse)
	r := &reading{capped: count > maxBrowse, ended: make(chan error, 1)}
	if limit <= 0 {
		r.finished = true
		return r, nil
	}
	r.got = make(chan transport.Delivery, limit)
	// The consumer outlives ctx: it ends only once every message it handed
	// out is settled, which end sees to.
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = stop
	// The consumer stops taking messages before the caller settles any:
	// a message put back while it still took them would be dealt back to
	// it (the transport cancels it before it sends what was settled after
	// ctx ended).
	defer stop()
	go func() {
		r.ended <- c.conn.Transport().Consume(cctx, queue, limit, func(d transport.Delivery) { r.got <- d })
	}()
	idle := time.NewTimer(readIdle)
	defer idle.Stop()
	for len(r.held) < limit {
		select {
		case d := <-r.got:
			r.held = append(r.held, d)
			idle.Reset(readIdle)
		case err := <-r.ended:
			// The consumer ended before the read did: what it holds is
			// stale, and the broker has it back already.
			stop()
			r.finished = true
			for _, d := range r.held {
				_ = d.Nack(true)
			}
			if err == nil {
				err = errors.New("its consumer ended")
			}
			return nil, fmt.Errorf("acemq: console: reading %s: %w", queue, err)
		case <-idle.C:
			return r, nil
		case <-ctx.Done():
			return r, nil
		}
	}
	return r, nil
}

// end stops the read's consumer once the caller settled what it holds: a
// message that reached the consumer after the read stopped taking them is
// put back, and end returns once the consumer has sent every settlement.
func (r *reading) end() {
	if r.finished {
		return
	}
	r.finished = true
	r.stop()
	for {
		select {
		case d := <-r.got:
			_ = d.Nack(true)
		case <-r.ended:
			return
		}
	}
}

// putBack returns held to its queue and ends the read. A failed nack leaves
// the message to the broker, which requeues it when its channel closes.
func (r *reading) putBack() {
	for _, d := range r.held {
		_ = d.Nack(true)
	}
	r.end()
}

// settled reads queue's ready count until it is want again or settleWait
// has passed, and returns the last count read.
func (c *console) settled(ctx context.Context, queue string, want int) (int, error) {
	deadline := time.Now().Add(settleWait)
	for {
		n, err := c.ready(ctx, queue)
		if err != nil || n == want || time.Now().After(deadline) {
			return n, err
		}
		select {
		case <-ctx.Done():
			return n, nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

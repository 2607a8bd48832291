package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/transport"
)

var _ transport.Fencer = (*Transport)(nil)

// The fencing counter's stream: small segments and a small size bound, so
// that the broker drops all but the last few thousand marks while the
// offsets, which are the counter, keep growing.
const (
	fenceMaxBytes     = 1 << 20  // x-max-length-bytes
	fenceSegmentBytes = 64 << 10 // x-stream-max-segment-size-bytes
	fencePrefetch     = 64       // a stream consumer must have one
)

// Fence increases the counter name and returns its new value; it
// implements transport.Fencer.
//
// The counter is a stream queue named name (x-queue-type "stream", declared
// durable by Fence itself and not remembered with Declare's topology), and
// its value is a position in that stream's log: Fence subscribes at the end
// of the stream (x-stream-offset "next"), publishes one empty mark with a
// random message ID, waits for the broker's confirm, reads the marks that
// come until its own, and returns that mark's offset (the x-stream-offset
// header the broker stamps on every delivery) plus one. The broker assigns
// offsets in the order it appends, never twice, and keeps them growing when
// it drops old segments, so every value is greater than any value returned
// before the call began, on any connection. There is no lock and no state
// that spans steps: a client that dies anywhere in the call leaves at most
// an unread mark, an offset no one returned. A stream is replicated over
// the cluster's nodes as a quorum queue is and confirms a publish once a
// majority has written it, so a counter outlives the loss of a minority of
// nodes whether or not the consumers use quorum queues.
//
// Why not a queue holding the current value, drained with Get under a lease
// and rewritten: a holder that dies holding the value unacked leaves it
// invisible to the next holder until the broker requeues it, and RabbitMQ
// orders that requeue neither with the end of the lease (on a quorum queue
// whose consumer's node is cut off it waits for the node to come back), so
// the next holder can read an empty queue and start again from 1.
//
// Fence runs on a second connection the transport opens on first use, to
// the node of its current one, and opens again when it died: RabbitMQ 3.10
// answers a subscription to a stream it is still creating by crashing the
// channel and closing the whole connection, which must not take the
// transport's leases and consumers with it. A name held by a queue of
// another kind fails wrapping transport.ErrTopologyConflict; DeleteQueue
// deletes a counter, and the next Fence starts it again from 1.
func (t *Transport) Fence(ctx context.Context, name string) (uint64, error) {
	op := fmt.Sprintf("fence %q", name)
	switch {
	case name == "":
		return 0, errors.New("rabbitmq: fence: a counter needs a name")
	case len(name) > 255:
		return 0, fmt.Errorf("rabbitmq: fence: the counter name is %d bytes, over the broker's 255", len(name))
	case strings.HasPrefix(name, "amq."):
		return 0, fmt.Errorf("rabbitmq: %s: the amq. prefix is the broker's", op)
	}
	// Two refusals are waited out and tried again: a stream's members start
	// after its declaration returns, and a stream is read through the
	// member on the connection's node, so until that member runs the broker
	// refuses the subscription (406, closing the channel), or, a moment
	// earlier, the channel crashes on the missing stream and RabbitMQ 3.10
	// closes the whole connection (541 INTERNAL_ERROR). That is why Fence
	// runs on a connection of its own (see fenceConn): a crash there costs
	// the transport's leases and consumers nothing.
	var value uint64
	var err error
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		var conn *amqp.Connection
		conn, err = t.fenceConn(ctx, op)
		if err == nil {
			value, err = t.fenceOnce(ctx, conn, op, name)
			if err == nil || !(noLocalReplica(err) || conn.IsClosed()) {
				break
			}
		} else if t.isClosed() || ctx.Err() != nil {
			return 0, err
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			hint := ""
			if noLocalReplica(err) {
				hint = "; the stream has no running member on the connection's node (a node that joined after the stream was declared gets one with rabbitmq-streams add_replica)"
			}
			return 0, fmt.Errorf("rabbitmq: %s: %w%s: %w", op, ctx.Err(), hint, err)
		}
	}
	if err != nil {
		if strings.HasPrefix(err.Error(), "rabbitmq: ") {
			return 0, err
		}
		return 0, fmt.Errorf("rabbitmq: %s: %w", op, err)
	}
	return value, nil
}

// fenceConn returns the transport's fencing connection, dialling it to
// the node of the current session when there is none or it died. It is
// closed when the transport closes.
func (t *Transport) fenceConn(ctx context.Context, op string) (*amqp.Connection, error) {
	t.fence.mu.Lock()
	defer t.fence.mu.Unlock()
	if c := t.fence.conn; c != nil && !c.IsClosed() {
		return c, nil
	}
	s, err := t.current(ctx, op)
	if err != nil {
		return nil, err
	}
	if !t.track(1) {
		return nil, errClosed(op)
	}
	conn, err := t.dial(ctx, s.node)
	if err != nil {
		t.wg.Done()
		return nil, fmt.Errorf("rabbitmq: %s: connecting: %w", op, err)
	}
	t.fence.conn = conn
	gone := conn.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		defer t.wg.Done()
		select {
		case <-gone:
		case <-t.stopCtx.Done():
			_ = conn.Close()
		}
	}()
	return conn, nil
}

// fencing is the connection Fence runs on.
type fencing struct {
	mu   sync.Mutex
	conn *amqp.Connection
}

// noLocalReplica reports the broker's refusal to subscribe to a stream
// that has no running member on the connection's node.
func noLocalReplica(err error) bool {
	var e *amqp.Error
	return errors.As(err, &e) && e.Code == amqp.PreconditionFailed && strings.Contains(e.Reason, "replica on the local node")
}

// fenceOnce is one attempt of Fence on a fresh channel of conn: declare,
// subscribe at the end, publish a mark with a random ID, read it back.
func (t *Transport) fenceOnce(ctx context.Context, conn *amqp.Connection, op, name string) (uint64, error) {
	if ctx.Err() != nil {
		return 0, ctxError(op, ctx)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	id := "fence-" + hex.EncodeToString(b[:])
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("the fencing connection is gone: %w", t.scrub(err))
	}
	var value uint64
	err = runOnChannel(ctx, op, ch, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{
			"x-queue-type":                    "stream",
			"x-max-length-bytes":              int64(fenceMaxBytes),
			"x-stream-max-segment-size-bytes": int64(fenceSegmentBytes),
		})
		if err != nil {
			return classify("fence: declare", "stream", name, err)
		}
		if err := ch.Qos(fencePrefetch, 0, false); err != nil {
			return err
		}
		if err := ch.Confirm(false); err != nil {
			return err
		}
		marks, err := ch.Consume(name, "", false, false, false, false, amqp.Table{"x-stream-offset": "next"})
		if err != nil {
			return err
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", name, false, false, amqp.Publishing{
			MessageId:    id,
			DeliveryMode: amqp.Persistent,
		})
		if err != nil {
			return err
		}
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w (the mark was not stored)", transport.ErrNacked)
		}
		for {
			var d amqp.Delivery
			select {
			case d, ok = <-marks:
				if !ok {
					return errors.New("the channel closed before the mark was read back")
				}
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := d.Ack(false); err != nil {
				return err
			}
			if d.MessageId != id {
				continue
			}
			off, ok := streamOffset(d.Headers["x-stream-offset"])
			if !ok {
				return fmt.Errorf("the broker sent the mark without a usable x-stream-offset (%v)", d.Headers["x-stream-offset"])
			}
			value = off + 1
			return nil
		}
	})
	return value, err
}

// streamOffset reads the x-stream-offset header, an AMQP long.
func streamOffset(v any) (uint64, bool) {
	switch n := v.(type) {
	case int64:
		return uint64(n), n >= 0
	case int32:
		return uint64(n), n >= 0
	case int:
		return uint64(n), n >= 0
	case uint64:
		return n, true
	}
	return 0, false
}

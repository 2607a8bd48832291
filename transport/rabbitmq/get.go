package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/transport"
)

// getChannel is the one channel of a connection that Get takes messages
// on, opened on first use. Many messages may be held unsettled on it at
// once (a replay holds the ones it skips), each settled by its own tag; a
// channel per message would run into the broker's channel limit (2,047 by
// default) and pay two round trips more per message.
type getChannel struct {
	mu    sync.Mutex // guards opening and the fields below
	rpc   sync.Mutex // serialises basic.get: amqp091 does not match a reply to its call
	sess  *session
	ch    *amqp.Channel
	known map[string]bool // queues seen to exist on this channel
}

// Get takes one message from queue with basic.get and manual
// acknowledgement, or reports false when the queue is empty. The message
// stays unacknowledged until it is settled; it is stale (and redelivered)
// once the connection is lost. A missing queue fails wrapping
// transport.ErrNotFound. The wait for the broker's answer is not cut short
// by ctx, since abandoning it would close the channel every held message
// is on; a dead connection ends it through the heartbeat.
func (t *Transport) Get(ctx context.Context, queue string) (transport.Delivery, bool, error) {
	op := fmt.Sprintf("get from queue %q", queue)
	for {
		if err := ctx.Err(); err != nil {
			return transport.Delivery{}, false, ctxError(op, ctx)
		}
		s, err := t.current(ctx, op)
		if err != nil {
			return transport.Delivery{}, false, err
		}
		ch, err := t.gets.channel(s, queue, func() error {
			// Look first on a channel of its own: a 404 closes the channel
			// it happens on, and that must not be the one holding messages.
			_, err := t.Inspect(ctx, queue)
			return err
		})
		if errors.Is(err, errSessionGone) {
			continue
		}
		if err != nil {
			return transport.Delivery{}, false, err
		}
		t.gets.rpc.Lock()
		d, ok, err := ch.Get(queue, false)
		t.gets.rpc.Unlock()
		if err != nil {
			t.gets.forget(ch)
			if amqpCode(err) == amqp.NotFound {
				return transport.Delivery{}, false, classify("get from", "queue", queue, err)
			}
			select {
			case <-s.done:
				continue // the connection went: try on the next one
			default:
				return transport.Delivery{}, false, classify("get from", "queue", queue, err)
			}
		}
		if !ok {
			return transport.Delivery{}, false, nil
		}
		return toDelivery(d, queue, &getAcker{queue: queue, ch: ch}), true, nil
	}
}

var errSessionGone = errors.New("rabbitmq: the connection was lost")

// channel returns the get channel of session s, opening it when there is
// none, and makes sure queue exists with check the first time it is named.
func (g *getChannel) channel(s *session, queue string, check func() error) (*amqp.Channel, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sess != s || g.ch == nil || g.ch.IsClosed() {
		ch, err := s.conn.Channel()
		if err != nil {
			g.sess, g.ch = nil, nil
			select {
			case <-s.done:
				return nil, errSessionGone
			default:
				return nil, fmt.Errorf("rabbitmq: opening a channel for get: %w", err)
			}
		}
		g.sess, g.ch, g.known = s, ch, map[string]bool{}
	}
	if !g.known[queue] {
		if err := check(); err != nil {
			return nil, err
		}
		g.known[queue] = true
	}
	return g.ch, nil
}

// forget drops ch after it failed, so the next Get opens another.
func (g *getChannel) forget(ch *amqp.Channel) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == ch {
		_ = ch.Close()
		g.sess, g.ch, g.known = nil, nil, nil
	}
}

// getAcker settles the one message a Get took, on the channel it came on.
type getAcker struct {
	queue string
	ch    *amqp.Channel
	once  sync.Once
}

// Ack acknowledges the message; it fails once its channel is gone.
func (g *getAcker) Ack(tag uint64) error {
	return g.settle(tag, func() error { return g.ch.Ack(tag, false) })
}

// Nack rejects the message, requeued or dropped; it fails once its
// channel is gone.
func (g *getAcker) Nack(tag uint64, requeue bool) error {
	return g.settle(tag, func() error { return g.ch.Nack(tag, false, requeue) })
}

func (g *getAcker) settle(tag uint64, send func() error) error {
	var err error
	first := false
	g.once.Do(func() {
		first = true
		if e := send(); e != nil {
			err = fmt.Errorf("rabbitmq: delivery %d from queue %q is stale: its channel is gone, and the broker redelivers it: %w", tag, g.queue, e)
		}
	})
	if !first {
		return fmt.Errorf("rabbitmq: delivery %d from queue %q was already settled", tag, g.queue)
	}
	return err
}

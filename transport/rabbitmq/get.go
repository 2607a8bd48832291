package rabbitmq

import (
	"context"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/transport"
)

// Get takes one message from queue with basic.get and manual
// acknowledgement, or reports false when the queue is empty. The message
// comes on a channel of its own that stays open until it is settled, so
// settle it soon; it is stale (and redelivered) once the connection is
// lost. A missing queue fails wrapping transport.ErrNotFound.
func (t *Transport) Get(ctx context.Context, queue string) (transport.Delivery, bool, error) {
	op := fmt.Sprintf("get from queue %q", queue)
	for {
		s, err := t.current(ctx, op)
		if err != nil {
			return transport.Delivery{}, false, err
		}
		ch, err := s.conn.Channel()
		if err != nil {
			select {
			case <-s.done:
				continue
			case <-ctx.Done():
				return transport.Delivery{}, false, ctxError(op, ctx)
			case <-t.closing:
				return transport.Delivery{}, false, errClosed(op)
			}
		}
		stop := context.AfterFunc(ctx, func() { _ = ch.Close() })
		d, ok, err := ch.Get(queue, false)
		if !stop() {
			_ = ch.Close()
			return transport.Delivery{}, false, ctxError(op, ctx)
		}
		if err != nil {
			_ = ch.Close()
			return transport.Delivery{}, false, classify("get from", "queue", queue, err)
		}
		if !ok {
			_ = ch.Close()
			return transport.Delivery{}, false, nil
		}
		ga := &getAcker{queue: queue, ch: ch}
		return toDelivery(d, queue, ga), true, nil
	}
}

// getAcker settles the one message a Get took, then closes its channel.
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
	err := fmt.Errorf("acemq: rabbitmq delivery %d from queue %q was already settled", tag, g.queue)
	g.once.Do(func() {
		if e := send(); e != nil {
			err = fmt.Errorf("acemq: rabbitmq delivery %d from queue %q is stale: its channel is gone, and the broker redelivers it: %w", tag, g.queue, e)
		} else {
			err = nil
		}
		_ = g.ch.Close()
	})
	return err
}

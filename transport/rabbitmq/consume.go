package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/acemq/acemq/internal/wire"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/transport"
)

// consumerState is what Health knows of one running Consume.
type consumerState struct {
	queue string

	mu        sync.Mutex
	consuming bool
	since     time.Time
	err       error
}

func (c *consumerState) set(consuming bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.consuming != consuming || c.since.IsZero() {
		c.since = time.Now()
	}
	c.consuming = consuming
	c.err = err
}

// Consume hands queue's deliveries to handle, from this goroutine and in
// delivery order, with at most prefetch unsettled (0 means no limit). It
// survives connection losses: it waits for the next connection and
// consumes again, while the deliveries it handed out on the lost channel
// become stale (their Ack fails; the broker redelivers them). When ctx ends
// it cancels the consumer, waits until every delivery it handed out is
// settled or its channel is gone, and returns nil. It returns at once an
// error wrapping transport.ErrNotFound when the queue does not exist, and
// one wrapping transport.ErrClosed when the transport is or gets closed.
func (t *Transport) Consume(ctx context.Context, queue string, prefetch int, handle func(transport.Delivery)) error {
	return t.consume(ctx, queue, prefetch, handle, false)
}

// ConsumeHandOver is Consume made to hand a single-active-consumer queue to
// the next consumer in order; it implements transport.HandOverConsumer.
// When ctx ends it hands out nothing more and, without cancelling the
// consumer, waits until every delivery it handed out is acked, nacked or
// given up with transport.Delivery.Release (or its channel is gone), then
// closes the channel. The broker puts every message of the channel left
// unacked back in queue order (the released ones, and those it sent after
// ctx ended, which were never handed out) before it makes the next
// consumer the active one. A basic.cancel first would let the broker
// activate the next consumer while these are still out. Across a
// connection loss it behaves as Consume.
func (t *Transport) ConsumeHandOver(ctx context.Context, queue string, prefetch int, handle func(transport.Delivery)) error {
	return t.consume(ctx, queue, prefetch, handle, true)
}

func (t *Transport) consume(ctx context.Context, queue string, prefetch int, handle func(transport.Delivery), handOver bool) error {
	if handle == nil {
		return fmt.Errorf("rabbitmq: consume from queue %q: the handler is nil", queue)
	}
	if prefetch < 0 || prefetch > 65535 {
		return fmt.Errorf("rabbitmq: consume from queue %q: prefetch %d is outside 0..65535", queue, prefetch)
	}
	if t.isClosed() {
		return errClosed(fmt.Sprintf("consume from queue %q", queue))
	}
	st := &consumerState{queue: queue}
	st.set(false, errStarting)
	t.mu.Lock()
	t.consumers[st] = struct{}{}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.consumers, st)
		t.mu.Unlock()
	}()

	first := true
	failures := 0
	for {
		s, err := t.current(ctx, fmt.Sprintf("consume from queue %q", queue))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		cc, deliveries, closes, err := t.startConsumer(ctx, s, queue, prefetch)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if first && isSoftError(err) {
				return err
			}
			st.set(false, err)
			t.log.Warn("acemq: rabbitmq consumer did not start", "queue", queue, "error", err)
			failures++
			if !t.pause(ctx, t.backoff(failures-1)) {
				if ctx.Err() != nil {
					return nil
				}
				return errClosed(fmt.Sprintf("consume from queue %q", queue))
			}
			continue
		}
		cc.handOver = handOver
		first, failures = false, 0
		st.set(true, nil)
		ended, err := t.runConsumer(ctx, cc, deliveries, closes, handle)
		if ended {
			return nil
		}
		if t.isClosed() {
			return errClosed(fmt.Sprintf("consume from queue %q", queue))
		}
		st.set(false, err)
		t.log.Warn("acemq: rabbitmq consumer stopped; resuming", "queue", queue, "error", err)
		if errors.Is(err, errCancelled) {
			t.declareQueueAgain(ctx, queue)
		}
	}
}

// errStarting is why a consumer is not consuming before its first
// subscription was made or failed.
var errStarting = errors.New("starting")

// errCancelled is why a consumer stopped when the broker cancelled it
// (basic.cancel): its queue was deleted, its node went down, or, from
// RabbitMQ 4.3, a quorum queue's consumer_timeout passed with a delivery
// unacknowledged (the broker puts that delivery back in the queue).
var errCancelled = errors.New("the broker cancelled the consumer")

// declareQueueAgain declares queue and its bindings again when this
// transport declared them, as after a reconnection: a queue deleted under
// its consumer comes back, and the consumer resumes on it. A queue that
// is still there is left as it is; a failure is logged, and the consumer
// then waits for the queue with its backoff.
func (t *Transport) declareQueueAgain(ctx context.Context, queue string) {
	var items []transport.Topology
	t.mu.Lock()
	for _, it := range t.topo {
		switch v := it.(type) {
		case transport.Queue:
			if v.Name == queue {
				items = append(items, it)
			}
		case transport.Binding:
			if v.Queue == queue {
				items = append(items, it)
			}
		}
	}
	t.mu.Unlock()
	if len(items) == 0 {
		return
	}
	// Bounded: the consumer waits for its queue with its backoff anyway.
	ctx, cancel := context.WithTimeout(ctx, redeclareWait)
	defer cancel()
	err := t.withChannel(ctx, fmt.Sprintf("declare queue %q again", queue), func(ch *amqp.Channel) error {
		for _, it := range items {
			if err := declareOne(ch, it); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		t.log.Warn("acemq: rabbitmq queue of a cancelled consumer not declared again", "queue", queue, "error", t.scrub(err))
	}
}

// pause waits d, or less when ctx ends (false) or the transport closes (false).
func (t *Transport) pause(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	case <-t.closing:
		return false
	}
}

// startConsumer opens a channel on s, sets its prefetch and starts
// consuming queue on it. Those calls wait for the broker, so they run on a
// goroutine of the transport's, and startConsumer returns when ctx ends
// first; that goroutine then closes the channel once they have returned,
// and what the broker sent goes back to the queue. (Closing the channel
// under them instead would put two calls waiting on it at once: amqp091
// may hand the one's reply to the other, and the loser waits for ever.)
// The calls themselves end with the connection, as at Close.
func (t *Transport) startConsumer(ctx context.Context, s *session, queue string, prefetch int) (*consumerChannel, <-chan amqp.Delivery, chan *amqp.Error, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("rabbitmq: consume from queue %q: opening a channel: %w", queue, t.scrub(err))
	}
	if !t.track(1) {
		_ = ch.Close()
		return nil, nil, nil, errClosed(fmt.Sprintf("consume from queue %q", queue))
	}
	done := make(chan subscribed) // unbuffered: one side only takes the result
	go func() {
		defer t.wg.Done()
		r := subscribe(ch, queue, prefetch)
		select {
		case done <- r:
		case <-ctx.Done():
			_ = ch.Close()
		}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, nil, nil, classify("consume from", "queue", queue, r.err)
		}
		cc := newConsumerChannel(queue, ch, s, prefetch)
		cc.tag = r.tag
		cc.cancels = r.cancels
		return cc, r.deliveries, r.closes, nil
	case <-ctx.Done():
		return nil, nil, nil, fmt.Errorf("rabbitmq: consume from queue %q: %w", queue, context.Cause(ctx))
	}
}

// subscribed is what subscribe made of a channel.
type subscribed struct {
	tag        string
	deliveries <-chan amqp.Delivery
	closes     chan *amqp.Error
	cancels    chan string
	err        error
}

// subscribe sets ch's prefetch and consumes queue on it; it closes ch when
// that fails.
func subscribe(ch *amqp.Channel, queue string, prefetch int) subscribed {
	if err := ch.Qos(prefetch, 0, false); err != nil {
		_ = ch.Close()
		return subscribed{err: err}
	}
	r := subscribed{tag: consumerTag()}
	r.closes = ch.NotifyClose(make(chan *amqp.Error, 1))
	// One consumer per channel, so one cancel at most: amqp091 sends it
	// before closing the deliveries, and waits for room to.
	r.cancels = ch.NotifyCancel(make(chan string, 1))
	var err error
	if r.deliveries, err = ch.Consume(queue, r.tag, false, false, false, false, nil); err != nil {
		_ = ch.Close()
		return subscribed{err: err}
	}
	return r
}

func consumerTag() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "acemq-" + hex.EncodeToString(b[:])
}

// runConsumer hands deliveries out and flushes settlements until ctx ends
// (ended: every handed-out delivery is then settled and the channel
// closed) or the channel dies (not ended, with the reason).
func (t *Transport) runConsumer(ctx context.Context, cc *consumerChannel, deliveries <-chan amqp.Delivery, closes chan *amqp.Error, handle func(transport.Delivery)) (bool, error) {
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				select {
				case <-cc.cancels:
					cc.kill()
					_ = cc.ch.Close()
					return false, fmt.Errorf("%w (queue %q)", errCancelled, cc.queue)
				default:
				}
				return false, cc.end(closes)
			}
			if ctx.Err() != nil {
				// Stopping: hand nothing more out (d goes back with the
				// channel).
				return t.stop(cc, closes)
			}
			cc.handOut(d.DeliveryTag)
			handle(toDelivery(d, cc.queue, cc))
		case <-cc.wake:
			if ctx.Err() != nil {
				// Stopping: the consumer is cancelled before anything
				// settled after ctx ended is sent, so a requeued message
				// is never dealt back to it.
				return t.stop(cc, closes)
			}
			if err := cc.flush(); err != nil {
				return false, cc.end(closes)
			}
		case <-ctx.Done():
			return t.stop(cc, closes)
		case <-t.closing:
			return false, cc.end(closes)
		}
	}
}

// stop ends a consumer whose ctx ended: a hand-over as handOver does, any
// other as drain does.
func (t *Transport) stop(cc *consumerChannel, closes chan *amqp.Error) (bool, error) {
	if cc.handOver {
		return t.handOver(cc, closes)
	}
	return t.drain(cc, closes)
}

// end kills cc after its channel died, or was found unusable, and returns why.
func (cc *consumerChannel) end(closes chan *amqp.Error) error {
	cc.kill()
	_ = cc.ch.Close()
	if e, ok := <-closes; ok && e != nil {
		return e
	}
	return errors.New("the consumer was cancelled or its channel closed")
}

// drain stops the consumer and waits for the application to settle what
// it was handed, then closes the channel; deliveries still buffered are
// not handed out and go back to the queue with the channel.
func (t *Transport) drain(cc *consumerChannel, closes chan *amqp.Error) (bool, error) {
	// A failed cancel means the channel is gone: nothing is left to wait for.
	if err := cc.ch.Cancel(cc.tag, false); err != nil {
		cc.kill()
		_ = cc.ch.Close()
		return true, nil
	}
	return t.settleAndClose(cc, closes, "stopped")
}

// handOver ends a ConsumeHandOver: it leaves the consumer subscribed and
// the deliveries the broker sends meanwhile unread, waits for the
// application to settle or release what it was handed, sends the last
// acks, and closes the channel, which requeues the rest in order.
func (t *Transport) handOver(cc *consumerChannel, closes chan *amqp.Error) (bool, error) {
	return t.settleAndClose(cc, closes, "handed-over")
}

// settleAndClose waits until every delivery cc handed out is settled (or
// released), flushing settlements as they come, sends the last acks and
// closes the channel; it stops waiting when the channel dies or the
// transport closes. what names the consumer in the warning a failed last
// flush logs. It always reports the consumer ended.
func (t *Transport) settleAndClose(cc *consumerChannel, closes chan *amqp.Error, what string) (bool, error) {
	for cc.unsettled() > 0 {
		select {
		case <-cc.wake:
			if err := cc.flush(); err != nil {
				_ = cc.end(closes)
				return true, nil
			}
		case <-closes:
			cc.kill()
			return true, nil
		case <-t.closing:
			cc.kill()
			return true, nil
		}
	}
	if err := cc.flush(); err != nil {
		// The broker redelivers what these acks covered: handled again,
		// not lost.
		t.log.Warn("acemq: rabbitmq sending the last acks of a "+what+" consumer failed", "queue", cc.queue, "error", t.scrub(err))
	}
	cc.kill()
	_ = cc.ch.Close()
	return true, nil
}

func toDelivery(d amqp.Delivery, queue string, acker transport.Acknowledger) transport.Delivery {
	return transport.Delivery{
		Message: transport.Message{
			Exchange:      d.Exchange,
			RoutingKey:    d.RoutingKey,
			Headers:       wire.FromTable(d.Headers),
			ContentType:   d.ContentType,
			MessageID:     d.MessageId,
			CorrelationID: d.CorrelationId,
			Type:          d.Type,
			AppID:         d.AppId,
			ReplyTo:       d.ReplyTo,
			Timestamp:     d.Timestamp,
			Body:          d.Body,
		},
		Queue:       queue,
		Redelivered: d.Redelivered,
		Tag:         d.DeliveryTag,
		Acker:       acker,
	}
}

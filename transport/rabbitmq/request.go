package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/transport"
)

// replySession is the channel that sends requests and receives their
// replies. RabbitMQ's direct reply-to requires both on one channel: it
// consumes amq.rabbitmq.reply-to (no-ack) and publishes requests in confirm
// mode, and a dispatcher hands each reply to the request whose message ID
// is the reply's correlation ID. It lives as long as its channel; the next
// Request after its death opens another.
type replySession struct {
	pc   *pubChannel
	reqs chan *pubReq

	mu      sync.Mutex
	waiters map[string]chan transport.Message
	dead    bool
}

var errReplyDead = errors.New("rabbitmq: request: the reply channel closed")

// Request publishes m with ReplyTo set to transport.DirectReplyTo and
// returns the first reply whose CorrelationID is m.MessageID. ctx bounds
// every wait, the reply's included. A request whose channel closes before
// its reply arrives fails (the reply would go to the closed channel); the
// caller may send it again.
func (t *Transport) Request(ctx context.Context, m transport.Message) (transport.Message, error) {
	if m.MessageID == "" {
		return transport.Message{}, fmt.Errorf("rabbitmq: request to exchange %q, routing key %q: the message has no ID to correlate the reply with", m.Exchange, m.RoutingKey)
	}
	if t.isClosed() {
		return transport.Message{}, errClosed("request")
	}
	m.ReplyTo = transport.DirectReplyTo
	req, err := newPubReq(ctx, m, false)
	if err != nil {
		return transport.Message{}, err
	}
	if err := t.exchangeExists(ctx, m.Exchange); err != nil {
		return transport.Message{}, err
	}
	var rs *replySession
	var w chan transport.Message
	for {
		if rs, err = t.replyChannel(ctx); err != nil {
			return transport.Message{}, err
		}
		if w, err = rs.register(m.MessageID); !errors.Is(err, errReplyDead) {
			break
		}
	}
	if err != nil {
		return transport.Message{}, err
	}
	defer rs.unregister(m.MessageID, w)
	if err := t.acquire(ctx, req); err != nil {
		return transport.Message{}, err
	}
	if err := rs.enqueue(req); err != nil {
		<-t.slots
		return transport.Message{}, err
	}
	// The reply may overtake the confirm: either one ends the wait for the
	// other, since a reply proves the request arrived.
	done := req.done
	for {
		select {
		case err := <-done:
			if err != nil {
				return transport.Message{}, err
			}
			done = nil
		case reply, ok := <-w:
			if !ok {
				return transport.Message{}, fmt.Errorf("rabbitmq: request %q: the reply channel closed before the reply came", m.MessageID)
			}
			return reply, nil
		case <-ctx.Done():
			return transport.Message{}, ctxError(fmt.Sprintf("request %q waiting for its reply", m.MessageID), ctx)
		case <-t.closing:
			return transport.Message{}, errClosed("request")
		}
	}
}

// replyChannel returns the live reply session, opening one when needed.
// The wait for a connection happens before replyMu is taken, so one
// caller's ctx never holds the others up there.
func (t *Transport) replyChannel(ctx context.Context) (*replySession, error) {
	for {
		s, err := t.current(ctx, "request")
		if err != nil {
			return nil, err
		}
		t.replyMu.Lock()
		if rs := t.reply; rs != nil && !rs.isDead() {
			t.replyMu.Unlock()
			return rs, nil
		}
		rs, err := t.openReply(s)
		if err == nil {
			t.reply = rs
		}
		t.replyMu.Unlock()
		if err == nil {
			return rs, nil
		}
		select {
		case <-s.done:
		case <-ctx.Done():
			return nil, ctxError("request opening the reply channel", ctx)
		default:
			return nil, fmt.Errorf("rabbitmq: request: opening the reply channel: %w", t.scrub(err))
		}
	}
}

func (t *Transport) openReply(s *session) (*replySession, error) {
	reqs := make(chan *pubReq, t.cfg.ConfirmWindow)
	pc, err := t.openPubChannel(s, reqs)
	if err != nil {
		return nil, err
	}
	replies, err := pc.ch.Consume(transport.DirectReplyTo, "", true, false, false, false, nil)
	if err != nil {
		_ = pc.ch.Close()
		<-pc.died
		return nil, err
	}
	rs := &replySession{pc: pc, reqs: reqs, waiters: make(map[string]chan transport.Message)}
	if !t.track(2) {
		_ = pc.ch.Close()
		<-pc.died
		return nil, errClosed("request")
	}
	go func() {
		defer t.wg.Done()
		pc.run()
		// Requests queued after the channel died are failed, not lost.
		rs.kill()
		for {
			select {
			case r := <-reqs:
				t.requeue(reqs, r, errConnectionLost)
			default:
				return
			}
		}
	}()
	go func() {
		defer t.wg.Done()
		for d := range replies {
			rs.dispatch(d)
		}
		rs.kill()
	}()
	return rs, nil
}

func (rs *replySession) isDead() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.dead
}

func (rs *replySession) register(id string) (chan transport.Message, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.dead {
		return nil, errReplyDead
	}
	if _, dup := rs.waiters[id]; dup {
		return nil, fmt.Errorf("rabbitmq: request %q: a request with this ID is already waiting", id)
	}
	w := make(chan transport.Message, 1)
	rs.waiters[id] = w
	return w, nil
}

// enqueue queues req for the reply channel's writer, unless the session
// is dead: its queue is drained once, after it died, so nothing queued
// later would ever be completed.
func (rs *replySession) enqueue(req *pubReq) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.dead {
		return errReplyDead
	}
	select {
	case rs.reqs <- req:
		return nil
	default:
		return errors.New("rabbitmq: request: the publish queue is full")
	}
}

func (rs *replySession) unregister(id string, w chan transport.Message) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.waiters[id] == w {
		delete(rs.waiters, id)
	}
}

// dispatch hands a reply to its waiter; a reply nobody waits for (late, or
// a duplicate) is dropped.
func (rs *replySession) dispatch(d amqp.Delivery) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	w, ok := rs.waiters[d.CorrelationId]
	if !ok {
		return
	}
	delete(rs.waiters, d.CorrelationId)
	w <- toDelivery(d, transport.DirectReplyTo, nil).Message
}

// kill fails every waiter: their replies would come to a closed channel.
func (rs *replySession) kill() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.dead {
		return
	}
	rs.dead = true
	for id, w := range rs.waiters {
		close(w)
		delete(rs.waiters, id)
	}
}

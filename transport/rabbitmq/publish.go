package rabbitmq

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/acemq/acemq/internal/wire"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/transport"
)

// pubReq is one publish travelling through the transport. It holds one
// token of the confirm window from the moment it is queued until it is
// completed; whoever removes it from the transport (a writer dropping an
// abandoned one, a listener resolving its confirm, Close draining the
// queue) completes it, exactly once.
type pubReq struct {
	ctx      context.Context // the caller's; once it ends the caller is gone
	exchange string
	key      string
	msg      amqp.Publishing
	done     chan error // capacity 1: the outcome
	returned error      // set by the listener when a basic.return matched it
	// resend tells what to do when the channel dies before its confirm:
	// true sends it again elsewhere, false fails it (direct reply-to
	// requests, which are bound to the channel that sent them).
	resend bool
	// nacks counts the broker's nacks of it: it is sent again, each time
	// on another channel, until maxNacks.
	nacks int
	// dc is the confirmation of its latest write, which holds the
	// broker's answer (see pubChannel.confirm); writing is set while that
	// write has not returned. Both are guarded by the mu of the channel
	// it is in flight on.
	dc      *amqp.DeferredConfirmation
	writing bool
	// strikes counts the closures it was in flight at that the broker gave
	// a reason for naming nothing (see pubChannel.die); above zero it is
	// written alone, and at maxStrikes it fails.
	strikes int
	// A publish with an ordering key (header x-acemq-key) travels in its
	// key's lane (see pubkeys.go): keyed says it does (a direct reply-to
	// request, bound to its channel, never does), laneID names the lane,
	// lane is set from the moment the transport takes it until it
	// completes, and flying (written and unconfirmed) and held (waiting in
	// the lane for the publishes before it) are guarded by keyLanes.mu.
	laneID laneID
	keyed  bool
	lane   *lane
	flying bool
	held   bool
}

func (r *pubReq) abandoned() bool { return r.ctx.Err() != nil }

// mandatory tells whether the publish carries the mandatory flag: always,
// except for a reply to a direct reply-to address, which RabbitMQ counts as
// "not routed" (and returns) even when it reaches the requester.
func (r *pubReq) mandatory() bool {
	return r.exchange != "" || !strings.HasPrefix(r.key, transport.DirectReplyTo+".")
}

// Publish sends m with the mandatory flag and persistent delivery mode on
// the publishing channel (a reply to a direct reply-to address goes
// without the flag, since RabbitMQ reports such replies unroutable even when
// they arrive), and returns once the broker confirmed it. What the broker
// would refuse (a name, key or property over 255 bytes, a header value it
// cannot parse) fails at once, naming the field and the limit. The first
// publish to an exchange checks that it exists, on a channel of its own
// (see Config.Channels); a missing one fails that publish, wrapping
// transport.ErrNotFound and naming it, and nothing else.
// It waits, each wait bounded by ctx, for room in the confirm window, for
// the connection when it is down, and for the confirm. A publish whose
// confirm is lost with its connection is sent again, with the same message
// ID, on the next one; it is never reported sent unless confirmed. An
// unroutable message fails wrapping transport.ErrUnroutable, a publish to a
// missing exchange wrapping transport.ErrNotFound. A nacked publish is sent
// again on another channel, and the channel that nacked it is replaced once
// its other confirms are in; after four nacks the publish fails wrapping
// transport.ErrNacked. A publish the broker answers by closing the channel
// or the connection for no reason it names (a frame it cannot parse, say)
// is sent again alone, and fails with that reason once it was in flight at
// two such closures.
//
// Publishes with an ordering key (a string in the header x-acemq-key) keep
// the order in which the transport took them, per key and exchange: one is
// written only after every earlier one of its key has been confirmed or
// written before it on the same channel, and a key's first publish on a
// channel is written alone, its successors following once the broker acked
// it there. A publish lost with its channel or nacked is sent again before
// any later one of its key; what the broker had taken before the loss
// arrives a second time. A publish that fails for good, or whose caller
// gave up, no longer holds the later ones back.
func (t *Transport) Publish(ctx context.Context, m transport.Message) error {
	if t.isClosed() {
		return errClosed("publish")
	}
	req, err := newPubReq(ctx, m, true)
	if err != nil {
		return err
	}
	if err := t.exchangeExists(ctx, m.Exchange); err != nil {
		return err
	}
	return t.send(ctx, t.reqs, req)
}

func newPubReq(ctx context.Context, m transport.Message, resend bool) (*pubReq, error) {
	if err := wire.CheckMessage(m); err != nil {
		return nil, fmt.Errorf("rabbitmq: publish to exchange %q, routing key %q: %w", wire.Clip(m.Exchange), wire.Clip(m.RoutingKey), err)
	}
	headers := wire.TableOf(m.Headers) // CheckMessage checked them
	id, keyed := laneOf(m.Exchange, m.Headers)
	return &pubReq{
		laneID:   id,
		keyed:    keyed && resend,
		ctx:      ctx,
		exchange: m.Exchange,
		key:      m.RoutingKey,
		resend:   resend,
		done:     make(chan error, 1),
		msg: amqp.Publishing{
			Headers:       headers,
			ContentType:   m.ContentType,
			MessageId:     m.MessageID,
			CorrelationId: m.CorrelationID,
			Type:          m.Type,
			AppId:         m.AppID,
			ReplyTo:       m.ReplyTo,
			Timestamp:     m.Timestamp,
			Body:          m.Body, // copied once a window token is taken
			DeliveryMode:  amqp.Persistent,
		},
	}, nil
}

// acquire takes a confirm-window token for req, waiting up to ctx, and
// then copies its body, which the caller may reuse once Publish returns
// while the transport may still hold req. Copying only with a token means
// callers waiting for room hold no copy: the window bounds the copies.
func (t *Transport) acquire(ctx context.Context, req *pubReq) error {
	select {
	case t.slots <- struct{}{}:
		req.msg.Body = bytes.Clone(req.msg.Body)
		return nil
	case <-ctx.Done():
		return t.publishCtxError(req.what()+" waiting for room in the confirm window", ctx)
	case <-t.closing:
		return errClosed("publish")
	}
}

// PublishBatch publishes every message of ms as Publish does, all from
// this goroutine: each takes a confirm-window token and goes to the
// writers at once, so up to the window's worth are in flight while later
// ones wait for room, and the confirms are awaited together once every
// message is queued. The result has one error per message, in ms's order.
// Messages of one ordering key reach the broker in ms's order, as
// Publish's are kept in the order of their calls.
func (t *Transport) PublishBatch(ctx context.Context, ms []transport.Message) []error {
	return t.publishBatch(ctx, ms, nil)
}

// publishBatch is PublishBatch; edit, when set, may change each request
// before it is queued (tests use it to send what the checks refuse).
func (t *Transport) publishBatch(ctx context.Context, ms []transport.Message, edit func(i int, r *pubReq)) []error {
	errs := make([]error, len(ms))
	reqs := make([]*pubReq, len(ms))
	for i, m := range ms {
		if t.isClosed() {
			errs[i] = errClosed("publish")
			continue
		}
		if ctx.Err() != nil {
			// Ended: build and queue nothing more (a free window slot
			// could otherwise win the race with ctx.Done in enqueue).
			errs[i] = ctxError("publish", ctx)
			continue
		}
		req, err := newPubReq(ctx, m, true)
		if err == nil {
			err = t.exchangeExists(ctx, m.Exchange)
		}
		if err == nil && edit != nil {
			edit(i, req)
		}
		if err == nil {
			err = t.enqueue(ctx, t.reqs, req)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		reqs[i] = req
	}
	for i, req := range reqs {
		if req != nil {
			errs[i] = t.await(ctx, req)
		}
	}
	return errs
}

// send takes a window token, writes req itself when the publishing
// channel is idle (see direct) or else queues it on q, and waits for its
// outcome. PublishBatch always queues: its writer frames one message while
// the batch's goroutine prepares the next.
func (t *Transport) send(ctx context.Context, q chan *pubReq, req *pubReq) error {
	if err := t.enqueueOrWrite(ctx, q, req, q == t.reqs); err != nil {
		return err
	}
	return t.await(ctx, req)
}

// enqueue takes a window token for req, waiting up to ctx, and queues it
// on q for the writers.
func (t *Transport) enqueue(ctx context.Context, q chan *pubReq, req *pubReq) error {
	return t.enqueueOrWrite(ctx, q, req, false)
}

// enqueueOrWrite is enqueue, but with write set it first tries to write
// req from the caller's goroutine (see direct).
func (t *Transport) enqueueOrWrite(ctx context.Context, q chan *pubReq, req *pubReq, write bool) error {
	if err := t.acquire(ctx, req); err != nil {
		return err
	}
	if req.keyed {
		t.keys.admit(req)
	}
	if write && t.direct(req) {
		return nil
	}
	// Every queued or in-flight request holds a token and q holds as many
	// as the window, so this never blocks; the default is a safety net.
	select {
	case q <- req:
		return nil
	default:
		err := fmt.Errorf("rabbitmq: %s: the publish queue is full", req.what())
		t.complete(req, err)
		return err
	}
}

// await waits for the outcome of a queued req, up to ctx.
func (t *Transport) await(ctx context.Context, req *pubReq) error {
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		// The request stays owned by the transport; if it was written it
		// may still be confirmed, but this caller is told it was not.
		return t.publishCtxError(req.what()+" waiting for its confirm", ctx)
	case <-t.closing:
		return errClosed(req.what())
	}
}

func (r *pubReq) what() string {
	return fmt.Sprintf("publish to exchange %q, routing key %q", r.exchange, r.key)
}

// complete gives back req's window token and delivers its outcome; the
// token goes first, so a caller told its outcome no longer counts in
// Outstanding. A keyed publish leaves its lane first, and the publishes of
// its key that waited for it go to the writers.
func (t *Transport) complete(r *pubReq, err error) {
	var next []*pubReq
	if r.lane != nil {
		next = t.keys.leave(r)
	}
	<-t.slots
	select {
	case r.done <- err:
	default:
	}
	t.requeueAll(next)
}

// requeue hands a request whose channel died back to the writers, or
// completes it when nobody waits for it any more or it cannot be resent.
func (t *Transport) requeue(q chan *pubReq, r *pubReq, cause error) {
	switch {
	case t.isClosed():
		t.complete(r, errClosed(r.what()))
		return
	case r.abandoned():
		t.complete(r, r.ctx.Err())
		return
	case !r.resend:
		t.complete(r, fmt.Errorf("rabbitmq: %s: the channel closed before the confirm: %w", r.what(), t.scrub(cause)))
		return
	}
	select {
	case q <- r:
	default:
		t.complete(r, fmt.Errorf("rabbitmq: %s: the publish queue is full", r.what()))
	}
}

package rabbitmq

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/transport"
)

// pubChannel is one publishing channel in confirm mode: a writer (the
// goroutine calling run) takes requests from src and writes them, a
// listener goroutine resolves them from the broker's returns and confirms.
// No lock is held while a confirm is awaited: the writer moves on to the
// next request at once.
type pubChannel struct {
	t   *Transport
	s   *session
	ch  *amqp.Channel
	src chan *pubReq // where requests come from, and go back to on loss

	// wmu is held by whoever writes on the channel: the writer goroutine,
	// or a caller writing its own request (Transport.direct). It orders the
	// delivery tags (next) with the writes.
	wmu sync.Mutex

	mu       sync.Mutex
	wrote    sync.Cond          // on mu: a write returned (see pubReq.writing)
	inflight map[uint64]*pubReq // written, not yet confirmed, by delivery tag
	idle     chan struct{}      // closed when inflight empties; nil unless awaited
	acked    bool               // the broker has acked a publish on the channel
	dead     bool
	died     chan struct{} // closed by the listener once the channel is gone
	next     uint64        // the last delivery tag used; under wmu

	// recycle is closed at the channel's first nack: the writer stops
	// taking requests, lets the confirms in flight arrive, and closes the
	// channel so that keepPublisher opens a fresh one. RabbitMQ 3.10 nacks
	// every publish to a quorum queue on a channel that first published to
	// it while its leader's node was down, until the channel closes.
	recycle     chan struct{}
	recycleOnce sync.Once
}

// openPubChannel opens a channel on s in confirm mode and starts its
// listener. The caller runs the writer with run.
func (t *Transport) openPubChannel(s *session, src chan *pubReq) (*pubChannel, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	pc := &pubChannel{
		t:        t,
		s:        s,
		ch:       ch,
		src:      src,
		inflight: make(map[uint64]*pubReq),
		died:     make(chan struct{}),
		recycle:  make(chan struct{}),
	}
	pc.wrote.L = &pc.mu
	// Confirms are buffered beyond the window, so the connection's reader
	// never waits on them. Returns are unbuffered on purpose: the reader
	// hands a return over before it goes on to the confirm that follows it,
	// so the listener always sees a return while its publish is in flight.
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, t.cfg.ConfirmWindow+16))
	returns := ch.NotifyReturn(make(chan amqp.Return))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	if !t.track(1) {
		_ = ch.Close()
		return nil, errClosed("open a publishing channel")
	}
	go pc.listen(confirms, returns, closes)
	return pc, nil
}

// keepPublisher keeps one publishing channel open on whatever connection is
// live, until the transport closes.
func (t *Transport) keepPublisher() {
	defer t.wg.Done()
	failures := 0
	for {
		s, err := t.current(t.stopCtx, "publisher")
		if err != nil {
			return
		}
		pc, err := t.openPubChannel(s, t.reqs)
		if err != nil {
			t.log.Warn("acemq: rabbitmq publishing channel did not open", "error", t.scrub(err))
			failures++
		} else {
			t.pub.Store(pc)
			pc.run()
			t.pub.CompareAndSwap(pc, nil)
			if pc.progressed() {
				failures = 0
			} else {
				failures++
			}
		}
		// A channel the broker closed on a live connection is reopened at
		// once, and its unconfirmed publishes go out on the new one. Only
		// one that closes again before the broker acked anything on it
		// waits first, so a request the broker keeps refusing cannot spin
		// the loop.
		select {
		case <-s.done:
		default:
			if failures > 1 && !t.sleep(t.backoff(failures-2)) {
				return
			}
		}
	}
}

// progressed reports whether the broker acked any publish on the channel.
func (pc *pubChannel) progressed() bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.acked
}

// waitIdle waits until no publish written on the channel awaits its
// confirm; false means the channel died or the transport closed first.
func (pc *pubChannel) waitIdle() bool {
	pc.mu.Lock()
	if len(pc.inflight) == 0 || pc.dead {
		dead := pc.dead
		pc.mu.Unlock()
		return !dead
	}
	if pc.idle == nil {
		pc.idle = make(chan struct{})
	}
	idle := pc.idle
	pc.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-pc.died:
		return false
	case <-pc.t.closing:
		return false
	}
}

// removedLocked wakes waitIdle once the last in-flight publish is gone;
// pc.mu is held.
func (pc *pubChannel) removedLocked() {
	if len(pc.inflight) == 0 && pc.idle != nil {
		close(pc.idle)
		pc.idle = nil
	}
}

// run writes requests from src until the channel dies or the transport closes.
func (pc *pubChannel) run() {
	for {
		select {
		case <-pc.died:
			return
		case <-pc.t.closing:
			_ = pc.ch.Close()
			<-pc.died
			return
		case <-pc.recycle:
			pc.retire()
			return
		case r := <-pc.src:
			if r.resend && pc.retiring() {
				// A nack came in while both were ready: r goes back for
				// another channel rather than onto this one.
				pc.t.requeue(pc.src, r, transport.ErrNacked)
				pc.retire()
				return
			}
			pc.wmu.Lock()
			ok := pc.write(r)
			pc.wmu.Unlock()
			if !ok {
				_ = pc.ch.Close()
				<-pc.died
				return
			}
		}
	}
}

// direct writes req on the live publishing channel from the caller's
// goroutine, one hand-off fewer than through the writer, when that costs
// nobody a wait: nothing is queued ahead of req, no writer is writing, the
// channel takes requests and the broker does not block publishing. Under
// load the channel is busy, requests queue up, and the writer drains them
// back to back as before. It reports false when req must be queued
// instead; true means req is the transport's (written, or given back to
// the queue by write when the channel failed under it).
func (t *Transport) direct(req *pubReq) bool {
	pc := t.pub.Load()
	if pc == nil || len(t.reqs) > 0 || req.strikes > 0 || !pc.wmu.TryLock() {
		return false
	}
	defer pc.wmu.Unlock()
	if pc.retiring() || pc.s.blockedWait() != nil {
		return false
	}
	if !pc.write(req) {
		_ = pc.ch.Close() // the writer sees it die and returns
	}
	return true
}

// retiring reports whether the channel has nacked and takes no more.
func (pc *pubChannel) retiring() bool {
	select {
	case <-pc.recycle:
		return true
	default:
		return false
	}
}

// retire closes a channel that nacked, once its confirms in flight are in.
func (pc *pubChannel) retire() {
	pc.t.log.Warn("acemq: rabbitmq nacked a publish; reopening the publishing channel", "node", pc.t.nodes[pc.s.node].safe)
	pc.drain()
	_ = pc.ch.Close()
	<-pc.died
}

// drain waits, for up to drainTimeout, until every publish written on the
// channel has its confirm, so that closing the channel sends none again.
func (pc *pubChannel) drain() {
	deadline := time.Now().Add(drainTimeout)
	for time.Now().Before(deadline) {
		pc.mu.Lock()
		n := len(pc.inflight)
		pc.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-pc.died:
			return
		case <-pc.t.closing:
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// maxNacks is how often a publish may be nacked before it fails with
// transport.ErrNacked: each nack sends it again on a fresh channel (the one
// that nacked is replaced), which is what a quorum queue's new leader needs.
const maxNacks = 4

// drainTimeout bounds drain; what is still in flight then is sent again.
// It is short: while it runs the channel writes nothing, and a channel that
// nacked may hold confirms back for as long as its queue elects a leader.
const drainTimeout = 500 * time.Millisecond

// write publishes r; false means the channel is unusable.
func (pc *pubChannel) write(r *pubReq) bool {
	t := pc.t
	if r.abandoned() {
		t.complete(r, r.ctx.Err())
		return true
	}
	if wait := pc.s.blockedWait(); wait != nil {
		select {
		case <-wait:
		case <-pc.died:
			t.requeue(pc.src, r, errConnectionLost)
			return false
		case <-r.ctx.Done():
			t.complete(r, r.ctx.Err())
			return true
		}
	}
	alone := r.strikes > 0 // read now: once in flight, r is the listener's
	if alone && !pc.waitIdle() {
		// A suspect goes alone (see die): it waits until nothing else is
		// in flight, and nothing is written after it until its confirm.
		t.requeue(pc.src, r, errConnectionLost)
		return false
	}
	if r.lane != nil && !t.keys.fly(r, pc) {
		return true // held in its key's lane, which sends it on later
	}
	tag := pc.next + 1
	pc.mu.Lock()
	if pc.dead {
		pc.mu.Unlock()
		t.land(r, pc, false, false)
		t.requeue(pc.src, r, errConnectionLost)
		return false
	}
	pc.inflight[tag] = r // before the write: the confirm may come at once
	r.dc, r.writing = nil, true
	pc.mu.Unlock()
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(context.Background(), r.exchange, r.key, r.mandatory(), false, r.msg)
	pc.mu.Lock()
	if pc.inflight[tag] == r {
		// Still this channel's: the channel may have died during the
		// write and handed r on to the next one.
		r.dc, r.writing = dc, false
	}
	pc.wrote.Broadcast()
	pc.mu.Unlock()
	if err != nil {
		pc.mu.Lock()
		own := pc.inflight[tag] == r
		if own {
			delete(pc.inflight, tag)
			pc.removedLocked()
		}
		pc.mu.Unlock()
		if own {
			t.land(r, pc, false, false)
			t.requeue(pc.src, r, err)
		}
		return false
	}
	pc.next = tag
	if alone {
		return pc.waitIdle()
	}
	return true
}

// listen resolves in-flight requests until the channel is gone, then
// settles the rest: sent again, failed, or dropped when abandoned.
func (pc *pubChannel) listen(confirms chan amqp.Confirmation, returns chan amqp.Return, closes chan *amqp.Error) {
	defer pc.t.wg.Done()
	for confirms != nil || returns != nil {
		select {
		case c, ok := <-confirms:
			if !ok {
				confirms = nil
				continue
			}
			pc.confirm(c)
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			pc.markReturned(r)
		}
	}
	var cause error = errConnectionLost
	if e, ok := <-closes; ok && e != nil {
		cause = e
	}
	pc.die(cause)
}

// confirm resolves the request c confirms. Whether the broker acked it is
// taken from the request's own DeferredConfirmation, not from c: RabbitMQ
// coalesces acks into one with multiple=true up to its lowest unconfirmed
// tag, and a tag it nacked no longer counts as unconfirmed, so a multiple
// ack may span a tag nacked before it. When that nack came ahead of the
// acks of earlier tags, amqp091-go holds it back to keep NotifyPublish in
// order and then reports the tag with the multiple ack's flag, as acked;
// the DeferredConfirmation keeps the nack. (Seen at a node kill: quorum
// queues electing a leader nack at once, while the acks before them wait
// for their queues' commits; the nacked publishes were lost.)
func (pc *pubChannel) confirm(c amqp.Confirmation) {
	pc.mu.Lock()
	r := pc.inflight[c.DeliveryTag]
	for r != nil && r.writing {
		pc.wrote.Wait() // the confirm beat the writer back from the write
		r = pc.inflight[c.DeliveryTag]
	}
	delete(pc.inflight, c.DeliveryTag)
	pc.removedLocked()
	ack := c.Ack
	if r != nil && r.dc != nil {
		ack = r.dc.Acked()
	}
	pc.acked = pc.acked || ack
	pc.mu.Unlock()
	if r != nil {
		pc.t.land(r, pc, true, ack)
	}
	switch {
	case r == nil:
	case !ack:
		pc.t.log.Debug("acemq: rabbitmq nacked a publish", "exchange", r.exchange, "routing_key", r.key,
			"id", r.msg.MessageId, "nacks", r.nacks+1)
		pc.recycleOnce.Do(func() { close(pc.recycle) })
		if r.nacks++; r.nacks < maxNacks && r.resend {
			// Again, on another channel (this one takes no more).
			pc.t.requeue(pc.src, r, transport.ErrNacked)
			return
		}
		pc.t.complete(r, kindError(transport.ErrNacked, nil, "rabbitmq: %s: the broker nacked the message", r.what()))
	default:
		pc.t.complete(r, r.returned)
	}
}

// markReturned finds the publish a basic.return answers. A return carries
// no delivery tag, but it reaches the listener before its own confirm, so
// its publish is still in flight: it is the earliest in-flight request not
// yet returned with the same exchange, routing key, message and
// correlation IDs and body. Two in-flight requests alike in all of these
// are the same message, and which of the two is told it was unroutable
// makes no difference to the caller.
func (pc *pubChannel) markReturned(ret amqp.Return) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	var best uint64
	for tag, r := range pc.inflight {
		if r.returned != nil || (best != 0 && tag > best) {
			continue
		}
		if r.exchange == ret.Exchange && r.key == ret.RoutingKey &&
			r.msg.MessageId == ret.MessageId && r.msg.CorrelationId == ret.CorrelationId &&
			bytes.Equal(r.msg.Body, ret.Body) {
			best = tag
		}
	}
	if best == 0 {
		return
	}
	pc.inflight[best].returned = kindError(transport.ErrUnroutable, nil, "rabbitmq: publish to exchange %q, routing key %q: no queue took the message (%d %s)",
		ret.Exchange, ret.RoutingKey, ret.ReplyCode, ret.ReplyText)
}

// maxStrikes is how many closures a publish may be in flight at, when the
// broker gave a reason that names nothing (see die), before it fails with
// that reason rather than being sent again.
const maxStrikes = 2

// die marks the channel gone and settles what was in flight on it:
//
//   - After a broker refusal naming an exchange (a missing exchange, say:
//     one deleted after its check) the publishes to it fail with the
//     refusal, the exchange is forgotten so that the next publish to it is
//     checked first, and the others are sent again.
//   - After a refusal that names nothing, or a connection the broker closed
//     because of what it was sent (a frame it could not parse: RabbitMQ
//     3.10 answers a NaN float in a header table with 541 INTERNAL_ERROR),
//     every publish in flight is a suspect: it is sent again alone (nothing
//     else in flight beside it), and one in flight at two such closures
//     fails with the broker's reason instead of being sent a third time.
//     Sent alone, the second time it is the only one that can have caused
//     the closure; the innocent are confirmed.
//   - After any other loss (the connection dropped) they are sent again,
//     a suspect still alone.
func (pc *pubChannel) die(cause error) {
	pc.mu.Lock()
	pc.dead = true
	lost := make([]uint64, 0, len(pc.inflight))
	for tag := range pc.inflight {
		lost = append(lost, tag)
	}
	sort.Slice(lost, func(i, j int) bool { return lost[i] < lost[j] })
	reqs := make([]*pubReq, len(lost))
	for i, tag := range lost {
		reqs[i] = pc.inflight[tag]
	}
	pc.inflight = nil
	pc.mu.Unlock()
	t := pc.t
	for _, r := range reqs {
		t.land(r, pc, false, false)
	}
	close(pc.died)

	named := map[string]bool{}
	if isSoftError(cause) {
		for _, r := range reqs {
			if r.exchange != "" && names(cause, r.exchange) {
				named[r.exchange] = true
			}
		}
	}
	switch {
	case len(named) > 0:
		t.log.Warn("acemq: rabbitmq closed the publishing channel", "error", t.scrub(cause), "inflight", len(reqs))
		for ex := range named {
			t.exchanges.forget(ex)
		}
		for _, r := range reqs {
			if named[r.exchange] {
				t.complete(r, classify("publish to", "exchange", r.exchange, t.scrub(cause)))
				continue
			}
			t.requeue(pc.src, r, cause)
		}
	case isSoftError(cause) || refusedWhatWasSent(cause):
		t.log.Warn("acemq: rabbitmq closed the publishing channel for what it was sent; sending its unconfirmed publishes again one at a time",
			"error", t.scrub(cause), "inflight", len(reqs))
		for _, r := range reqs {
			if r.strikes++; r.strikes >= maxStrikes {
				t.complete(r, fmt.Errorf("rabbitmq: %s: the broker closed the %s %d times with this message in flight, the last time with it alone: %w",
					r.what(), closedWhat(cause), r.strikes, t.scrub(cause)))
				continue
			}
			t.requeue(pc.src, r, cause)
		}
	default:
		// A strike stays: a socket error may beat the broker's own reason
		// to the client, and the suspect must still go alone.
		for _, r := range reqs {
			t.requeue(pc.src, r, cause)
		}
	}
}

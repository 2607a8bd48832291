package memory

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq/internal/wire"
	"github.com/acemq/acemq/transport"
)

// Exchange kinds.
const (
	kindDirect  = "direct"
	kindTopic   = "topic"
	kindFanout  = "fanout"
	kindHeaders = "headers"
)

// exchange routes messages to the queues and exchanges bound to it.
type exchange struct {
	name, kind string
	hash       hashOn // what a consistent-hash exchange hashes
	bindings   []binding
	ring       []binding // a consistent-hash exchange's buckets; nil until built
}

// binding is one queue (q) or exchange (x) bound to an exchange with a key;
// exactly one of q and x is set.
type binding struct {
	key string
	q   *queue
	x   *exchange
}

// replyPrefix starts every direct reply-to address.
const replyPrefix = transport.DirectReplyTo + "."

// replyWaiter is a Request waiting on its reply-to address.
type replyWaiter struct {
	t             *Transport
	correlationID string
	reply         chan transport.Message // buffered 1; takes the first match only
}

// routeLocked returns the queues ex routes m to, each once, following
// exchange-to-exchange bindings (an exchange reached twice routes once, so
// a loop of bindings ends). A nil ex is the default exchange. The slice is
// b.scratch: use it before routing again.
func (b *Broker) routeLocked(ex *exchange, m *transport.Message) []*queue {
	out := b.scratch[:0]
	if ex == nil {
		if q, ok := b.queues[m.RoutingKey]; ok {
			out = append(out, q)
		}
		b.scratch = out
		return out
	}
	out = b.routeFromLocked(ex, m, out)
	clear(b.seen)
	b.seen = b.seen[:0]
	b.scratch = out
	return out
}

// routeFromLocked appends to out the queues ex routes m to, skipping the
// exchanges routing has passed through already.
func (b *Broker) routeFromLocked(ex *exchange, m *transport.Message, out []*queue) []*queue {
	if slices.Contains(b.seen, ex) {
		return out
	}
	b.seen = append(b.seen, ex)
	to := func(bd binding) {
		switch {
		case bd.x != nil:
			out = b.routeFromLocked(bd.x, m, out)
		case !containsQueue(out, bd.q):
			out = append(out, bd.q)
		}
	}
	if ex.kind == kindConsistentHash {
		if bd, ok := ex.pickLocked(m); ok {
			to(bd)
		}
		return out
	}
	for _, bd := range ex.bindings {
		var match bool
		switch ex.kind {
		case kindDirect:
			match = bd.key == m.RoutingKey
		case kindTopic:
			match = topicMatch(bd.key, m.RoutingKey)
		default: // fanout, and headers with argument-less bindings
			match = true
		}
		if match {
			to(bd)
		}
	}
	return out
}

// PublishBatch publishes each message of ms as Publish does, in order: in
// process a publish is confirmed as it is made, so there is nothing to
// pipeline. The result has one error per message.
func (t *Transport) PublishBatch(ctx context.Context, ms []transport.Message) []error {
	errs := make([]error, len(ms))
	for i, m := range ms {
		errs[i] = t.Publish(ctx, m)
	}
	return errs
}

// Publish routes m and returns once every queue it reached holds it, which in
// process is at once. It copies m's body and header map. It fails with an
// error wrapping transport.ErrNotFound when the exchange does not exist and
// transport.ErrUnroutable when no queue took the message. What RabbitMQ
// would refuse (a name, key or property over 255 bytes, headers an AMQP
// table cannot carry) is refused by internal/wire's rules, which the RabbitMQ
// transport runs too.
func (t *Transport) Publish(ctx context.Context, m transport.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := wire.CheckMessage(m); err != nil {
		return fmt.Errorf("memory: publish to exchange %s, routing key %q: %w", quote(wire.Clip(m.Exchange)), wire.Clip(m.RoutingKey), err)
	}
	m.Body = bytes.Clone(m.Body)
	m.Headers = maps.Clone(m.Headers)
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.closed {
		return closedError("publish to exchange " + quote(m.Exchange))
	}
	return b.publishLocked(m)
}

func (b *Broker) publishLocked(m transport.Message) error {
	var ex *exchange
	if m.Exchange != "" {
		var ok bool
		if ex, ok = b.exchanges[m.Exchange]; !ok {
			return errorf(transport.ErrNotFound, "memory: publish: no exchange named %q", m.Exchange)
		}
	} else if strings.HasPrefix(m.RoutingKey, replyPrefix) {
		return b.replyLocked(m)
	}
	targets := b.routeLocked(ex, &m)
	if len(targets) == 0 {
		return errorf(transport.ErrUnroutable,
			"memory: no queue took the message published to exchange %s with routing key %q",
			quote(m.Exchange), m.RoutingKey)
	}
	var now int64
	for i, q := range targets {
		if q.decl.hasTTL && now == 0 {
			now = time.Now().UnixNano()
		}
		e := b.newEntryLocked(m, q)
		if i > 0 {
			e.msg.Headers = maps.Clone(m.Headers)
		}
		q.enqueueLocked(e, now)
	}
	b.flushLocked()
	return nil
}

// replyLocked hands m to the Request waiting on its reply-to address. A
// reply whose correlation ID does not match is taken and dropped, as the
// requester would; an address whose requester is gone is unroutable.
func (b *Broker) replyLocked(m transport.Message) error {
	w, ok := b.replies[m.RoutingKey]
	if !ok || w.t.closed {
		return errorf(transport.ErrUnroutable,
			"memory: no requester is waiting on reply-to address %q", m.RoutingKey)
	}
	if m.CorrelationID == w.correlationID {
		select {
		case w.reply <- m:
		default: // it has its reply already
		}
	}
	return nil
}

// Request publishes m with ReplyTo set to a direct reply-to address of its
// own and returns the first message published to that address whose
// CorrelationID equals m.MessageID. It fails with ctx's error when ctx ends
// first and with transport.ErrClosed when the client closes.
func (t *Transport) Request(ctx context.Context, m transport.Message) (transport.Message, error) {
	if err := ctx.Err(); err != nil {
		return transport.Message{}, err
	}
	addr := replyPrefix + rand.Text()
	w := &replyWaiter{t: t, correlationID: m.MessageID, reply: make(chan transport.Message, 1)}
	b := t.b
	b.mu.Lock()
	if t.closed {
		b.mu.Unlock()
		return transport.Message{}, closedError("request on exchange " + quote(m.Exchange))
	}
	b.replies[addr] = w
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.replies, addr)
		b.mu.Unlock()
	}()

	m.ReplyTo = addr
	if err := t.Publish(ctx, m); err != nil {
		return transport.Message{}, err
	}
	select {
	case r := <-w.reply:
		return r, nil
	case <-ctx.Done():
		return transport.Message{}, ctx.Err()
	case <-t.done:
		return transport.Message{}, closedError("request awaiting its reply")
	}
}

// quote names an exchange in an error, the default one included.
func quote(exchange string) string {
	if exchange == "" {
		return `"" (the default exchange)`
	}
	return `"` + exchange + `"`
}

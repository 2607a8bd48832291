// Package memory is an in-process message broker that behaves like RabbitMQ
// for everything the acemq engine asks of one. It is what a memory://NAME URL
// connects to, and the transport acemq's own unit tests run on.
//
// # Brokers and clients
//
// A Broker holds exchanges, queues and their messages. NewBroker makes a
// private one; Shared returns the broker registered under a name, so every
// caller in the process naming it reaches the same queues. A named broker
// lives as long as the process. Connect opens a client, a *Transport, on a
// broker: clients come and go without affecting the broker or each other,
// and what a client took but did not settle goes back to its queue, marked
// redelivered, when it closes.
//
// # What it emulates
//
// The default exchange, and exchanges of kind direct, topic and fanout
// (amq.direct, amq.topic, amq.fanout and amq.headers exist from the start).
// A headers exchange is accepted; since a Binding carries no arguments, it
// routes to every bound queue, as RabbitMQ does for a binding without any.
// Exchange-to-exchange bindings route on, an exchange reached twice routing
// once, so a loop of them ends.
//
// An x-consistent-hash exchange works as RabbitMQ's
// rabbitmq_consistent_hash_exchange plugin does: each bound queue or
// exchange takes as many buckets as its binding key's weight (a positive
// integer), in binding order, and a message goes to the bucket that jump
// consistent hashing picks for the value of the header named by argument
// hash-header (or of hash-property, or else of the routing key). The hash
// of a value differs from the plugin's, so a key lands in another queue
// than on RabbitMQ, but always in the same one. A message without the
// header goes to the first bucket, the first queue bound; the plugin too
// puts every such message in one bucket, one that depends on the number of
// buckets.
//
// A queue with x-single-active-consumer true deals to its first consumer
// only; when that one ends the next in subscription order takes over.
// Inspect counts every consumer of such a classic queue but only the active
// one of a quorum queue, as RabbitMQ 3.10 does. ConsumeHandOver and Lease
// implement transport.HandOverConsumer and transport.Leaser: a lease
// belongs to the client that took it and ends when that client closes.
// Fence implements transport.Fencer with counters the broker keeps for as
// long as it lives. Subscription implements transport.Subscriptions: a
// running Consume is always consuming. A client does not implement
// transport.Liveness: an in-process broker is never silent.
// Publishes are mandatory and confirmed at once. Queues are FIFO and honour
// x-message-ttl, x-dead-letter-exchange, x-dead-letter-routing-key and, on
// quorum queues, x-delivery-limit (20 when not given, as on RabbitMQ 4).
// Dead-lettered messages carry x-first-death-* and x-last-death-* headers
// (queue, reason, exchange) but no x-death table. Other arguments are stored
// and compared on redeclaration but not enforced. Direct reply-to works as
// on RabbitMQ: Request names an amq.rabbitmq.reply-to.TOKEN address.
//
// # Ownership of message bytes
//
// Publish copies the body and the header map, so a publisher may reuse its
// buffers at once. A delivery's Body and Headers belong to the broker's copy
// of the message: treat them as read-only, since a requeued message is
// delivered again as it is and a message routed to several queues shares one
// body. Header values and Timestamp are carried as given, with none of the
// conversions an AMQP wire makes.
//
// # Goroutines
//
// A client starts no goroutines: Consume delivers on the goroutine that calls
// it. Message expiry runs on one time.AfterFunc timer per queue that holds
// messages with a TTL, armed for the head's expiry and stopped when the
// queue is empty or deleted.
package memory

import (
	"fmt"
	"sync"

	"github.com/acemq/acemq/transport"
)

// Broker is an in-process broker: exchanges, queues and their messages. Its
// methods are safe for concurrent use. The zero value is not usable; call
// NewBroker or Shared.
type Broker struct {
	mu        sync.Mutex
	exchanges map[string]*exchange
	queues    map[string]*queue
	replies   map[string]*replyWaiter

	dirty   []*queue    // queues that took messages and must dispatch them
	scratch []*queue    // routing targets of the publish in progress
	seen    []*exchange // exchanges the routing in progress passed through
	leases  map[string]*lease
	fences  map[string]uint64 // fencing counters (fence.go)
	free    []*entry          // recycled entries
}

// maxFree bounds how many settled entries a broker keeps for reuse.
const maxFree = 4096

// NewBroker returns a fresh broker of its own with the amq.direct,
// amq.topic, amq.fanout and amq.headers exchanges declared.
func NewBroker() *Broker {
	b := &Broker{
		exchanges: make(map[string]*exchange),
		queues:    make(map[string]*queue),
		replies:   make(map[string]*replyWaiter),
		leases:    make(map[string]*lease),
	}
	for _, ex := range []struct{ name, kind string }{
		{"amq.direct", kindDirect},
		{"amq.topic", kindTopic},
		{"amq.fanout", kindFanout},
		{"amq.headers", kindHeaders},
	} {
		b.exchanges[ex.name] = &exchange{name: ex.name, kind: ex.kind}
	}
	return b
}

var registry struct {
	mu      sync.Mutex
	brokers map[string]*Broker
}

// Shared returns the broker registered in this process under name, creating
// it on first use: every caller naming it gets the same broker. An empty name
// returns a fresh broker that is not registered.
func Shared(name string) *Broker {
	if name == "" {
		return NewBroker()
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if b, ok := registry.brokers[name]; ok {
		return b
	}
	if registry.brokers == nil {
		registry.brokers = make(map[string]*Broker)
	}
	b := NewBroker()
	registry.brokers[name] = b
	return b
}

// New connects a client to the shared broker named name; it is shorthand for
// Shared(name).Connect().
func New(name string) *Transport {
	return Shared(name).Connect()
}

// Connect opens a new client on b. Closing the client leaves the broker and
// its other clients as they are.
func (b *Broker) Connect() *Transport {
	t := &Transport{
		b:         b,
		done:      make(chan struct{}),
		pending:   make(map[uint64]*entry),
		consumers: make(map[*consumer]struct{}),
	}
	t.acker = &acker{t: t}
	return t
}

// entry is one message on its way through the broker: ready in a queue,
// waiting in a consumer's inbox, or handed out to a client.
type entry struct {
	msg         transport.Message
	q           *queue
	seq         uint64    // its arrival number in q, which orders q's ready entries
	expires     int64     // unix nanoseconds; meaningful when q has a TTL
	redelivered bool      // it was handed out before and came back
	returns     int       // how often it came back unsettled (quorum delivery count)
	c           *consumer // the consumer it is handed out by; nil for Get
	released    bool      // given up by a ConsumeHandOver's Release, not settled
	expiredFrom []*queue  // queues it expired from since its last rejection
}

// newEntryLocked returns an entry for m in q, reusing a settled one if it
// can.
func (b *Broker) newEntryLocked(m transport.Message, q *queue) *entry {
	var e *entry
	if n := len(b.free); n > 0 {
		e = b.free[n-1]
		b.free[n-1] = nil
		b.free = b.free[:n-1]
	} else {
		e = new(entry)
	}
	e.msg, e.q = m, q
	return e
}

// releaseLocked forgets e; the message it held is gone from the broker.
func (b *Broker) releaseLocked(e *entry) {
	*e = entry{}
	if len(b.free) < maxFree {
		b.free = append(b.free, e)
	}
}

// markDirtyLocked notes that q has new ready messages to dispatch.
func (b *Broker) markDirtyLocked(q *queue) {
	if !q.dirty {
		q.dirty = true
		b.dirty = append(b.dirty, q)
	}
}

// flushLocked dispatches every queue that took messages, including those
// that take dead letters while others dispatch, until none is left.
func (b *Broker) flushLocked() {
	for len(b.dirty) > 0 {
		n := len(b.dirty) - 1
		q := b.dirty[n]
		b.dirty[n] = nil
		b.dirty = b.dirty[:n]
		q.dirty = false
		if !q.deleted {
			q.dispatchLocked()
		}
	}
}

// brokerError is an error with its own message that still matches a
// transport sentinel with errors.Is.
type brokerError struct {
	msg string
	err error
}

func (e *brokerError) Error() string { return e.msg }
func (e *brokerError) Unwrap() error { return e.err }

// errorf returns an error reading as the formatted message that wraps
// sentinel.
func errorf(sentinel error, format string, args ...any) error {
	return &brokerError{msg: fmt.Sprintf(format, args...), err: sentinel}
}

// closedError reports op on a closed client.
func closedError(op string) error {
	return errorf(transport.ErrClosed, "memory: %s: the memory transport is closed", op)
}

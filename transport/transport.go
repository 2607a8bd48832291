// Package transport is the contract between the acemq engine and a message
// broker. The engine renders envelopes, runs interceptors and settles
// deliveries; a [Transport] moves bytes, confirms publishes and hands out
// deliveries. Two implementations ship with acemq: transport/rabbitmq (over
// amqp091-go) and transport/memory (an in-process broker). Both pass the
// conformance suite in transport/transporttest, and so must any other.
//
// # Promises a Transport makes
//
//   - Every method is safe for concurrent use by many goroutines.
//   - Publish returns nil only after the broker has confirmed the message. A
//     message no queue takes (publishes are always mandatory) fails with
//     [ErrUnroutable]; a broker nack with [ErrNacked]; a closed transport with
//     [ErrClosed]; an ended ctx with ctx's error. Concurrent publishes are
//     pipelined: no lock is held while a confirm is awaited.
//   - Consume hands deliveries to its callback, at most prefetch of them
//     unsettled at a time, until ctx ends. When ctx ends it stops taking new
//     deliveries and returns once every delivery it handed out has been acked
//     or nacked (or the channel it came on is gone). A transport that
//     reconnects resumes its consumers by itself.
//   - [Delivery.Ack] and [Delivery.Nack] fail, never panic, when the channel the
//     delivery came on is gone; a stale delivery is never settled on a newer
//     channel (the broker redelivers it instead).
//   - Declare is idempotent; a transport that reconnects declares again what
//     it declared before.
//   - A transport may also implement [BatchPublisher], which SendAll uses to
//     put a whole batch in flight from one call; its promises are Publish's,
//     message by message.
//
// # Optional capabilities
//
// Besides [BatchPublisher], a transport may implement [Leaser] and
// [HandOverConsumer] (what ordered consumers are built from), [Fencer]
// (fencing tokens the broker keeps), [Liveness] (when the transport last
// heard its broker, by the process's own monotonic clock) and
// [Subscriptions] (whether the consumers of a queue are subscribed, queue
// by queue). Both shipped transports implement Leaser, HandOverConsumer,
// Fencer and Subscriptions; only transport/rabbitmq implements Liveness:
// an in-process broker cannot go silent, so a transport without it is
// never taken to be cut off. A transport without Subscriptions has its
// consumers taken to be consuming while they run.
package transport

import (
	"context"
	"errors"
	"time"

	"github.com/acemq/acemq/internal/errkind"
)

// Sentinel errors every Transport reports with, wrapped in errors of its own.
// Like every error of this package they begin "transport: ". Package acemq
// declares the first five again in its own words (acemq.ErrClosed reads
// "acemq: the connection is closed"), and errors.Is holds between the two
// of a kind either way: errors.Is(err, acemq.ErrClosed) for an error that
// wraps transport.ErrClosed, and the other way round. Compare with
// errors.Is, never with ==.
//
// A transport's errors begin with its own name ("rabbitmq: ", "memory: ")
// and wrap a sentinel with %w, or match it with errors.Is while leaving
// its text out (an Unwrap of their own), as rabbitmq and memory do. A
// transport may return a sentinel bare. Either way the root wraps the
// error as its cause, one prefix per package: "acemq: publishing …:
// rabbitmq: publish to …: no queue took the message (312 NO_ROUTE)", or
// "acemq: publishing …: transport: the connection is closed".
var (
	// ErrClosed reports a call on a closed transport or Conn.
	ErrClosed = errkind.Closed.Sentinel("transport: the connection is closed")
	// ErrUnroutable reports a mandatory publish that no queue took.
	ErrUnroutable = errkind.Unroutable.Sentinel("transport: the message was unroutable")
	// ErrNacked reports a publish the broker refused with a nack.
	ErrNacked = errkind.Nacked.Sentinel("transport: the broker nacked the message")
	// ErrTopologyConflict reports a declaration that contradicts what the
	// broker already has (a queue with other arguments, say).
	ErrTopologyConflict = errkind.TopologyConflict.Sentinel("transport: the declaration conflicts with the broker's")
	// ErrNotFound reports a queue or exchange that does not exist.
	ErrNotFound = errkind.NotFound.Sentinel("transport: not found")
	// ErrLocked reports a lease (see [Leaser]) that another connection
	// holds.
	ErrLocked = errors.New("transport: held by another connection")
)

// ErrMissingPlugin reports a declaration the broker refused because a
// plugin it needs is not enabled (an x-consistent-hash exchange without
// rabbitmq_consistent_hash_exchange). The transport's error wrapping it
// names the plugin and how to enable it.
var ErrMissingPlugin = errors.New("transport: the broker lacks a plugin")

// DirectReplyTo is the pseudo-queue a request names in ReplyTo to receive its
// reply on the requesting connection, as RabbitMQ's direct reply-to does.
const DirectReplyTo = "amq.rabbitmq.reply-to"

// UnreadableHeaders is the one header a transport leaves on a message whose
// headers it could not read (a table nested too deep, too large or
// malformed), in place of them; its value says what was wrong. The engine
// parks such a message with that reason rather than let it break the
// consumer.
const UnreadableHeaders = "x-acemq-unreadable-headers"

// Message is what travels: the engine renders its envelope into the headers
// and properties, the transport carries them as they are.
type Message struct {
	Exchange, RoutingKey string

	Headers       map[string]any
	ContentType   string
	MessageID     string
	CorrelationID string
	Type          string
	AppID         string
	ReplyTo       string
	Timestamp     time.Time
	Body          []byte
}

// Acknowledger settles deliveries by tag. It is implemented by a transport's
// channel or consumer; a Delivery carries the one it came from.
type Acknowledger interface {
	Ack(tag uint64) error
	Nack(tag uint64, requeue bool) error
}

// Delivery is one message handed out by Consume or Get.
type Delivery struct {
	Message
	Queue       string
	Redelivered bool
	Tag         uint64
	Acker       Acknowledger
}

// Ack settles the delivery as handled. It fails, and never panics, when the
// channel the delivery came on is gone.
func (d Delivery) Ack() error {
	if d.Acker == nil {
		return errors.New("transport: the delivery has no acknowledger")
	}
	return d.Acker.Ack(d.Tag)
}

// Nack settles the delivery as not handled; with requeue the broker puts it
// back at the head of its queue, without it the broker drops or dead-letters
// it by the queue's arguments.
func (d Delivery) Nack(requeue bool) error {
	if d.Acker == nil {
		return errors.New("transport: the delivery has no acknowledger")
	}
	return d.Acker.Nack(d.Tag, requeue)
}

// Topology is something Declare creates: an Exchange, a Queue or a Binding.
type Topology interface{ isTopology() }

// Exchange is a durable exchange. Kind is "direct", "topic", "fanout",
// "headers" or "x-consistent-hash" (RabbitMQ's shipped plugin
// rabbitmq_consistent_hash_exchange); empty means "direct". Args are the
// broker arguments ("hash-header" for x-consistent-hash, say).
type Exchange struct {
	Name string
	Kind string
	Args map[string]any
}

// Queue is a durable queue. Quorum makes it a quorum queue; Args are the
// broker arguments (x-message-ttl, x-dead-letter-exchange,
// x-dead-letter-routing-key, x-delivery-limit, ...). Transient makes a
// classic queue that does not survive its broker node (RabbitMQ: durable
// false): when that node is lost the broker forgets the queue, so it can
// be declared again on another node; an in-process broker ignores it. A
// quorum queue cannot be Transient.
type Queue struct {
	Name      string
	Quorum    bool
	Transient bool
	Args      map[string]any
}

// Binding routes Exchange's messages with routing key Key to Queue.
type Binding struct {
	Exchange string
	Key      string
	Queue    string
}

// ExchangeBinding routes Source's messages with routing key Key to the
// exchange Destination (an exchange-to-exchange binding).
type ExchangeBinding struct {
	Source      string
	Key         string
	Destination string
}

func (Exchange) isTopology()        {}
func (Queue) isTopology()           {}
func (Binding) isTopology()         {}
func (ExchangeBinding) isTopology() {}

// QueueInfo is what a passive look at a queue tells.
type QueueInfo struct {
	Name      string
	Messages  int // ready, not counting the unacked
	Consumers int
}

// Transport is the broker seam. See the package documentation for the
// promises every implementation keeps.
type Transport interface {
	// Publish sends m (mandatory) and returns once the broker confirmed it.
	Publish(ctx context.Context, m Message) error

	// Consume delivers queue's messages to handle until ctx ends, with at
	// most prefetch of them unsettled. handle is called from one goroutine
	// per Consume, in delivery order, and must not block for long: the engine
	// hands deliveries to its workers. Once ctx has ended it hands nothing
	// more out, and what is settled from then on reaches the broker only
	// after the subscription has ended, so a message requeued then is not
	// dealt back to it. Consume returns nil once ctx has ended and every
	// delivery it handed out is settled; it returns an error at once when
	// the queue does not exist or the transport is closed.
	Consume(ctx context.Context, queue string, prefetch int, handle func(Delivery)) error

	// Get takes one message from queue, or reports false when it is empty.
	Get(ctx context.Context, queue string) (Delivery, bool, error)

	// Request publishes m with ReplyTo set to the transport's direct reply-to
	// address and returns the first message whose CorrelationID equals
	// m.MessageID that arrives there, or ctx's error.
	Request(ctx context.Context, m Message) (Message, error)

	// Declare creates the topology, idempotently. A declaration that
	// contradicts the broker's fails with ErrTopologyConflict naming it.
	Declare(ctx context.Context, t ...Topology) error

	// Inspect reports a queue's ready messages and consumers, or ErrNotFound.
	Inspect(ctx context.Context, queue string) (QueueInfo, error)

	// DeleteQueue deletes a queue and its messages; a missing queue is not an
	// error.
	DeleteQueue(ctx context.Context, queue string) error

	// DeleteExchange deletes an exchange and its bindings; a missing
	// exchange is not an error. The transport stops declaring it again
	// after a reconnect, as DeleteQueue does for a queue.
	DeleteExchange(ctx context.Context, exchange string) error

	// Health returns nil when the transport is connected and every running
	// consumer is consuming, otherwise an error saying what is down and since
	// when.
	Health(ctx context.Context) error

	// Close releases the connection. It is idempotent; every later call
	// fails with ErrClosed.
	Close() error
}

// BatchPublisher is what a Transport may add to publish many messages from
// one call. The engine's SendAll uses it when the transport has it, and
// calls Publish from a pool of goroutines otherwise; a transport whose
// publishes are cheap to make concurrent need not implement it.
type BatchPublisher interface {
	// PublishBatch publishes every message of ms as Publish would
	// (mandatory, confirmed), with all of them in flight together as far as
	// the transport's confirm window allows, and returns once each one is
	// confirmed or has failed. The result has one error per message, in ms's
	// order: nil for a confirmed one, otherwise what Publish would have
	// returned for it. When ctx ends, the messages not yet confirmed fail
	// with ctx's error. Messages with one ordering key (header
	// x-acemq-key) reach the broker in ms's order, also when some are sent
	// again after a connection loss (SPEC §16: SendAll in slice order).
	PublishBatch(ctx context.Context, ms []Message) []error
}

// Leaser is what a Transport adds to hold leases that the broker ends
// together with the connection that holds them: on RabbitMQ an exclusive
// queue, which a second connection cannot declare (405 RESOURCE_LOCKED) and
// which the broker deletes when its connection dies. Ordered consumers
// spread their partitions over instances with them.
type Leaser interface {
	// Lease takes the lease name on the transport's current connection, or
	// fails with an error wrapping ErrLocked when another connection holds
	// it. A lease this transport already holds fails the same way (RabbitMQ
	// itself would let the same connection declare its exclusive queue
	// again): two holders on one transport never share a lease. A lease is
	// never taken again by itself after a reconnect: the holder learns from
	// Lost that it is gone and decides.
	Lease(ctx context.Context, name string) (Lease, error)
}

// Lease is one lease a Leaser took.
type Lease interface {
	// Lost is closed once the lease has ended without Release: its
	// connection is gone, and another connection may take it.
	Lost() <-chan struct{}
	// Release gives the lease up. It is idempotent.
	Release(ctx context.Context) error
}

// HandOverConsumer is what a Transport adds to consume a queue declared
// with x-single-active-consumer so that it can be handed to another
// consumer without two of them ever holding messages of it at once.
type HandOverConsumer interface {
	// ConsumeHandOver is Consume, but when ctx ends it hands out nothing
	// more and waits until every delivery it handed out has been acked,
	// nacked or given up with Delivery.Release (or its channel is gone);
	// then it ends the subscription by closing the channel, without a
	// cancel first, so that the broker puts every unsettled message back in
	// queue order before it makes the next consumer the active one.
	ConsumeHandOver(ctx context.Context, queue string, prefetch int, handle func(Delivery)) error
}

// Releaser is what an Acknowledger of a HandOverConsumer adds: Release
// counts a delivery as settled for the transport's waiting but sends the
// broker nothing, leaving the message to come back when the channel closes.
type Releaser interface {
	Release(tag uint64) error
}

// Release gives a delivery of ConsumeHandOver up unsettled; see [Releaser].
// On a delivery whose acknowledger cannot release it does nothing and
// reports an error.
func (d Delivery) Release() error {
	r, ok := d.Acker.(Releaser)
	if !ok {
		return errors.New("transport: the delivery cannot be released (not from ConsumeHandOver)")
	}
	return r.Release(d.Tag)
}

// Fencer is what a Transport adds to hand out fencing tokens: numbers per
// name that the broker keeps, so that a holder of something (a partition of
// an ordered queue) can stamp its writes and a store can refuse the writes
// of a holder that has been replaced (UPDATE ... WHERE fence <= $1). No
// database is involved.
type Fencer interface {
	// Fence increases the counter name and returns its new value, at least
	// 1. Every value it returns for a name is greater than every value any
	// Fence returned for that name before the call began, on any connection
	// to the broker, across reconnects, broker restarts, the loss of a
	// cluster node (the counter is replicated) and a client dying at any
	// point of the call. Values may skip numbers: a call that failed or was
	// cut short may use one up. On failure it returns 0 and an error; a
	// name the broker holds as something else (a queue of another kind)
	// fails wrapping ErrTopologyConflict.
	Fence(ctx context.Context, name string) (uint64, error)
}

// Liveness is what a Transport adds to say when it last heard from its
// broker, measured with the process's own monotonic clock. A process that
// was frozen (a long GC pause, a stopped VM, SIGSTOP) or cut off by the
// network sees, as soon as it runs again, that time.Since(LastHeard())
// exceeds Timeout(): by then the broker may have taken its connection for
// dead and ended its leases and subscriptions, whether or not the
// transport has noticed yet.
type Liveness interface {
	// LastHeard is when the transport last read anything (a frame of any
	// kind, heartbeats included) from the broker on its current
	// connection, or on the last one while it is down. Its value carries a
	// monotonic clock reading, so time.Since of it is immune to changes of
	// the wall clock.
	LastHeard() time.Time
	// Timeout is the shortest silence after which the broker may have
	// closed the connection as dead (leases and subscriptions with it).
	// Zero means the broker never does (no heartbeat).
	Timeout() time.Duration
}

// Subscriptions is what a Transport adds to say, queue by queue, what its
// Health says of its consumers as a whole: whether the running Consume and
// ConsumeHandOver calls of a queue are subscribed, or wait (for the
// connection to come back, say). The engine reports with it which of its
// consumers consume and which wait, in the same terms as Health.
type Subscriptions interface {
	// Subscription reports how the running Consume and ConsumeHandOver
	// calls of queue stand, or false when none runs. It does no I/O.
	Subscription(queue string) (Subscription, bool)
}

// Subscription is how the running consumers of one queue stand (see
// [Subscriptions]).
type Subscription struct {
	// Consuming is true while every one of them is subscribed.
	Consuming bool
	// Since is when that last changed: while consuming, when the last of
	// them subscribed; otherwise since when the first of those that are
	// not has not been.
	Since time.Time
	// Err is nil while consuming; otherwise it says why one is not, as the
	// transport's Health does.
	Err error
}

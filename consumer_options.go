package acemq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq/internal/wire"
)

// ConsumerOption configures a consumer that NewConsumer or NewRouter
// makes. Every AnyConsumerOption is one; Ordered is one of these alone.
type ConsumerOption interface{ applyConsumer(*consumerConfig) }

// BatchConsumerOption configures a batch consumer, one that
// NewBatchConsumer makes. Every AnyConsumerOption is one; BatchSize and
// BatchWait are of these alone. Options are typed by where they go, so
// that a misplaced one does not compile: BatchSize given to NewConsumer or
// NewRouter, or Ordered given to NewBatchConsumer.
type BatchConsumerOption interface{ applyBatchConsumer(*consumerConfig) }

// AnyConsumerOption is an option every consumer takes: NewConsumer,
// NewRouter and NewBatchConsumer. It is a ConsumerOption and a
// BatchConsumerOption.
type AnyConsumerOption interface {
	ConsumerOption
	BatchConsumerOption
}

// consumerOptionFunc is an AnyConsumerOption.
type consumerOptionFunc func(*consumerConfig)

func (f consumerOptionFunc) applyConsumer(c *consumerConfig)      { f(c) }
func (f consumerOptionFunc) applyBatchConsumer(c *consumerConfig) { f(c) }

// plainOptionFunc is a ConsumerOption and nothing else: Ordered's, which
// a batch consumer cannot take.
type plainOptionFunc func(*consumerConfig)

func (f plainOptionFunc) applyConsumer(c *consumerConfig) { f(c) }

// batchOptionFunc is a BatchConsumerOption and nothing else.
type batchOptionFunc func(*consumerConfig)

func (f batchOptionFunc) applyBatchConsumer(c *consumerConfig) { f(c) }

type consumerConfig struct {
	concurrency int
	prefetch    int
	policy      *RetryPolicy
	bindings    []Binding
	quorum      bool
	noDeclare   bool
	declareCtx  context.Context
	maxBody     int
	accept      []string
	killSwitch  *KillSwitchPolicy
	order       *OrderPolicy
	batch       *batchConfig // NewBatchConsumer's; nil for the others
	// nonessential keeps the consumer's state out of Health's error.
	nonessential bool
	// stuckAfter is StuckAfter's; 0 until newEngine sets the default.
	stuckAfter time.Duration
	// errs are the options' complaints, without a prefix: newEngine
	// returns them joined under "acemq: consumer of "q": ".
	errs []error
}

// MaxHeaderSize is the most, in bytes, a delivery's headers may take
// encoded: 128 KiB, RabbitMQ's default frame_max, which bounds the headers
// of any message a broker and client in their default configuration
// exchange. A consumer parks a delivery whose headers are bigger (a
// broker configured with a larger frame_max lets a producer send one),
// with a reason naming both sizes, rather than handle a message that a
// default-configured peer could not take again.
const MaxHeaderSize = 128 << 10

// DefaultMaxBodySize is the largest body a consumer decodes unless
// MaxBodySize says otherwise; a bigger one is parked.
const DefaultMaxBodySize = 16 << 20

// Concurrency sets how many deliveries are handled at once, each on a
// worker goroutine of its own (a batch consumer's: how many batches). The
// default is 1; n below 1 fails the constructor.
func Concurrency(n int) AnyConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("Concurrency(%d): want 1 or more", n))
			return
		}
		c.concurrency = n
	})
}

// Prefetch sets how many deliveries the broker may hand the consumer before
// it settles any. The default is max(64, 2×Concurrency), at most 65535 (a
// batch consumer's: see NewBatchConsumer); n outside 1 to 65535, the most
// RabbitMQ's basic.qos takes, fails the constructor. Deliveries
// prefetched but not started when Run stops go back to the queue.
func Prefetch(n int) AnyConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		if n < 1 || n > maxPrefetch {
			c.errs = append(c.errs, fmt.Errorf("Prefetch(%d): want 1 to %d", n, maxPrefetch))
			return
		}
		c.prefetch = n
	})
}

// maxPrefetch is the most a prefetch can be: basic.qos carries a 16-bit
// count.
const maxPrefetch = 65535

// WithConsumerRetry sets this consumer's retry ladder, instead of the
// Conn's (see WithRetryPolicy; the default is the Conn's). A policy
// RetryPolicy's own rules refuse (a negative MaxAttempts, a delay below
// 1ms or not of whole milliseconds) fails the constructor; its zero fields
// are the defaults.
func WithConsumerRetry(p RetryPolicy) AnyConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		p, err := p.normalize()
		if err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.policy = &p
	})
}

// Bind binds the queue to exchange with routing key key when NewConsumer
// declares it. It may be given several times; without it the queue has no
// binding but the default exchange's, by its name. The exchange must exist
// (declare it with Conn.Declare). With Ordered it binds the consumer's
// x-consistent-hash exchange {queue} to exchange instead (an
// exchange-to-exchange binding), so publishers keep publishing where they
// did. An empty exchange (the default exchange takes no bindings), or an
// exchange or key over 255 bytes, fails the constructor; an empty key is
// a key, the one a fanout exchange ignores.
func Bind(exchange, key string) AnyConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		switch {
		case exchange == "":
			c.errs = append(c.errs, fmt.Errorf("Bind(%q, %q): the default exchange takes no bindings (it routes to the queue its key names)", exchange, key))
		case len(exchange) > wire.MaxShortString || len(key) > wire.MaxShortString:
			c.errs = append(c.errs, fmt.Errorf("Bind was given an exchange of %d bytes and a key of %d: want at most %d bytes each", len(exchange), len(key), wire.MaxShortString))
		default:
			c.bindings = append(c.bindings, Binding{Exchange: exchange, Key: key})
		}
	})
}

// Quorum declares every queue of the consumer's ladder as a quorum queue:
// the queue, its retry tiers, its .dlq and its .parked (WithQuorumQueues
// does the same for every consumer of a Conn). Quorum queues are
// replicated over the nodes of a cluster and survive the loss of a
// minority of them; classic queues live on one node. Without it (or
// WithQuorumQueues) the queues are classic.
//
// A quorum queue counts redeliveries itself; the ladder republishes rather
// than requeues, so only crashes, failed moves and the deliveries a pause
// puts back count there, and the queue is given a delivery limit well
// above the policy's attempts (MaxAttempts+20) that dead-letters to
// {queue}.dlq rather than dropping. The retry tiers send expired messages
// back with at-least-once dead-lettering (x-dead-letter-strategy
// at-least-once, x-overflow reject-publish), so a message on its way back
// is not dropped while a node is down. An existing classic queue of the
// same name makes NewConsumer fail with how to migrate.
func Quorum() AnyConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) { c.quorum = true })
}

// NoDeclare makes NewConsumer (or NewRouter) declare nothing: the queue,
// its .dlq, .parked and retry tiers must exist already. Run looks for each
// of them first and fails, naming the ones missing, rather than start and
// loop on moves no queue can take. Bind is ignored. With Ordered, Run
// looks for the partition queues, .dlq, .parked and {queue}.blocked, and
// fails when the broker has another partition count. Without it the
// constructor declares them, idempotently.
func NoDeclare() AnyConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) { c.noDeclare = true })
}

// DeclareContext gives the declarations NewConsumer (or NewRouter) makes
// before it returns the caller's ctx: they end when ctx does, and the
// constructor then fails with an error wrapping ctx's. Without it they are
// bounded by 30 seconds. The constructor only uses ctx while it runs; a
// publish after it returned is routable either way. With NoDeclare there
// is nothing to bound. A nil ctx fails the constructor.
//
//	cons, err := acemq.NewConsumer(mq, "orders", handle, acemq.DeclareContext(ctx))
func DeclareContext(ctx context.Context) AnyConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		if ctx == nil {
			c.errs = append(c.errs, errors.New("DeclareContext was given a nil ctx"))
			return
		}
		c.declareCtx = ctx
	})
}

// MaxBodySize sets the largest body the consumer decodes; a bigger one is
// parked. It holds for a claim-checked body too, as its BodyStore loads it
// (BodyLimit): a claim naming more is parked before anything is read, and
// the load reads no more than n bytes (and one). The default is DefaultMaxBodySize (16 MiB); n below 1 fails the
// constructor.
func MaxBodySize(n int) AnyConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("MaxBodySize(%d): want 1 or more", n))
			return
		}
		c.maxBody = n
	})
}

// AcceptTypes makes a Consumer[T] take messages of the given types too,
// besides T's own type name (the one a Publisher[T] writes) and messages
// with no type, which it always takes; it may be given several times.
// Every name decodes into T. Use it when a type was renamed, or when a
// producer names its messages otherwise. An empty name, or one over 255
// bytes (the most a message's type can be), fails the constructor; no
// names add none. A Router takes no AcceptTypes, and NewRouter's Run fails
// with one (give a route TypeName instead): NewRouter takes the
// ConsumerOptions NewConsumer does, so this one compiles there.
func AcceptTypes(names ...string) AnyConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		for _, n := range names {
			switch {
			case n == "":
				c.errs = append(c.errs, errors.New("AcceptTypes was given an empty name"))
			case len(n) > wire.MaxShortString:
				c.errs = append(c.errs, fmt.Errorf("AcceptTypes was given a name of %d bytes; a type has at most %d", len(n), wire.MaxShortString))
			default:
				c.accept = append(c.accept, n)
			}
		}
	})
}

// Nonessential makes the consumer (or router) one whose trouble does not
// fail Conn.Health: while it is faulted, paused, tripped or waiting it is
// in HealthReport as usual, with its Err and Nonessential set, but
// HealthReport.Err (and so Health) leaves it out. Give it to a consumer
// the service can serve without, a cache warmer, an audit trail, so that a
// readiness probe built on Health does not take the service out of
// rotation for it. The connection's own error stays in Health: a broker
// that is down is down for every consumer. By default a consumer is
// essential.
func Nonessential() AnyConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) { c.nonessential = true })
}

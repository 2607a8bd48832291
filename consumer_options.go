package acemq

import (
	"context"
	"errors"
	"fmt"
)

// ConsumerOption configures a Consumer.
type ConsumerOption interface{ applyConsumer(*consumerConfig) }

type consumerOptionFunc func(*consumerConfig)

func (f consumerOptionFunc) applyConsumer(c *consumerConfig) { f(c) }

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
	// errs are the options' complaints, without a prefix: newEngine
	// returns them joined under "acemq: consumer of "q": ".
	errs []error
}

// DefaultMaxBodySize is the largest body a consumer decodes unless
// MaxBodySize says otherwise; a bigger one is parked.
const DefaultMaxBodySize = 16 << 20

// Concurrency sets how many deliveries are handled at once, each on a
// worker goroutine of its own. The default is 1; n must be at least 1.
func Concurrency(n int) ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("Concurrency(%d): want 1 or more", n))
			return
		}
		c.concurrency = n
	})
}

// Prefetch sets how many deliveries the broker may hand the consumer before
// it settles any. The default is max(64, 2×Concurrency); n must be at least
// 1. Deliveries prefetched but not started when Run stops go back to the
// queue.
func Prefetch(n int) ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("Prefetch(%d): want 1 or more", n))
			return
		}
		c.prefetch = n
	})
}

// WithConsumerRetry sets this consumer's retry ladder, instead of the
// Conn's (see WithRetryPolicy).
func WithConsumerRetry(p RetryPolicy) ConsumerOption {
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
// declares it. It may be given several times. The exchange must exist
// (declare it with Conn.Declare). With Ordered it binds the consumer's
// x-consistent-hash exchange {queue} to exchange instead (an
// exchange-to-exchange binding), so publishers keep publishing where they
// did.
func Bind(exchange, key string) ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		c.bindings = append(c.bindings, Binding{Exchange: exchange, Key: key})
	})
}

// Quorum declares every queue of the consumer's ladder as a quorum queue:
// the queue, its retry tiers, its .dlq and its .parked (WithQuorumQueues
// does the same for every consumer of a Conn). Quorum queues are
// replicated over the nodes of a cluster and survive the loss of a
// minority of them; classic queues live on one node.
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
func Quorum() ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) { c.quorum = true })
}

// NoDeclare makes NewConsumer (or NewRouter) declare nothing: the queue,
// its .dlq, .parked and retry tiers must exist already. Run looks for each
// of them first and fails, naming the ones missing, rather than start and
// loop on moves no queue can take. Bind is ignored. With Ordered, Run
// looks for the partition queues, .dlq, .parked and {queue}.blocked, and
// fails when the broker has another partition count.
func NoDeclare() ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) { c.noDeclare = true })
}

// DeclareContext gives the declarations NewConsumer (or NewRouter) makes
// before it returns the caller's ctx: they end when ctx does, and the
// constructor then fails with an error wrapping ctx's. Without it they are
// bounded by 30 seconds. The constructor only uses ctx while it runs; a
// publish after it returned is routable either way. With NoDeclare there
// is nothing to bound. A nil ctx is a configuration error.
//
//	cons, err := acemq.NewConsumer(mq, "orders", handle, acemq.DeclareContext(ctx))
func DeclareContext(ctx context.Context) ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		if ctx == nil {
			c.errs = append(c.errs, errors.New("DeclareContext was given a nil ctx"))
			return
		}
		c.declareCtx = ctx
	})
}

// MaxBodySize sets the largest body the consumer decodes; a bigger one is
// parked. The default is DefaultMaxBodySize (16 MiB); n must be at least 1.
func MaxBodySize(n int) ConsumerOption {
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
// producer names its messages otherwise. A Router takes no AcceptTypes:
// give a route TypeName instead.
func AcceptTypes(names ...string) ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		for _, n := range names {
			if n == "" {
				c.errs = append(c.errs, errors.New("AcceptTypes was given an empty name"))
				continue
			}
			c.accept = append(c.accept, n)
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
// that is down is down for every consumer.
func Nonessential() ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) { c.nonessential = true })
}

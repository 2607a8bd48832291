package acemq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq/transport"
)

// OrderPolicy says how an ordered consumer keeps the messages of one key in
// order; see Ordered.
type OrderPolicy struct {
	// Partitions is how many single-active-consumer queues the keys are
	// hashed into, and so how many instances can share the work. The
	// default is 16; it must be 1 to 1024. It is fixed once declared:
	// NewConsumer fails when the broker has the queue with another count.
	Partitions int
	// BlockOnFailure makes a message that fails for good block its key:
	// the key's later messages are held, durably, until ReleaseKey.
	BlockOnFailure bool
}

// The defaults and bounds of OrderPolicy, the longest total retry delay an
// ordered consumer may wait in place, and the reserved headers of ordering.
const (
	defaultPartitions = 16
	maxPartitions     = 1024
	// maxInPlaceDelay is RabbitMQ's delivery timeout (consumer_timeout)
	// as older 3.x releases set it: a delivery unacked for longer closes
	// its channel, so retries in place must stay under it.
	maxInPlaceDelay = 15 * time.Minute

	hdrControl = "x-acemq-control"
)

// Ordered makes the consumer (or router) handle the messages of one key
// (Envelope.Key, set with the Key send option) one at a time, in the order
// they were sent, while different keys run concurrently up to Concurrency.
// The consumer declares an x-consistent-hash exchange named after the queue
// that hashes the key into Partitions single-active-consumer queues,
// {queue}.p0 to {queue}.p{n-1}; instances of the consumer spread those
// partitions among themselves. Publish to the exchange {queue}, or Bind it
// to yours. Retries happen in place: a message that asks for another
// attempt waits its delay holding its key, and the total delay of the
// retry policy must stay under RabbitMQ's delivery timeout (15 minutes).
// docs/ordering.md tells the whole story.
func Ordered(p OrderPolicy) ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		if p.Partitions == 0 {
			p.Partitions = defaultPartitions
		}
		if p.Partitions < 1 || p.Partitions > maxPartitions {
			c.errs = append(c.errs, fmt.Errorf("OrderPolicy.Partitions is %d, want 1 to %d (or 0 for the default, %d)",
				p.Partitions, maxPartitions, defaultPartitions))
			return
		}
		c.order = &p
	})
}

// PartitionQueue is the name of partition i of an ordered consumer's
// queue: "orders.p0".
func PartitionQueue(queue string, i int) string { return fmt.Sprintf("%s.p%d", queue, i) }

// The other queues of an ordered consumer: the blocked-key registry and its
// lock, and the held messages of a blocked key (the members queue every
// instance consumes is membersTopology's).
func blockedQueue(queue string) string   { return queue + ".blocked" }
func blockedLock(queue string) string    { return queue + ".blocked.lock" }
func heldQueue(queue, key string) string { return queue + ".held." + keyHash(key) }

// checkOrdered checks what an ordered engine needs beyond the options: a
// transport with leases and hand-over consumers, and a retry policy whose
// waits fit in the broker's delivery timeout.
func (e *engine) checkOrdered() error {
	if _, ok := e.conn.t.(transport.Leaser); !ok {
		return fmt.Errorf("acemq: %s of %q is Ordered, but its transport (%T) has no leases (transport.Leaser)", e.who, e.queue, e.conn.t)
	}
	if _, ok := e.conn.t.(transport.HandOverConsumer); !ok {
		return fmt.Errorf("acemq: %s of %q is Ordered, but its transport (%T) cannot hand a queue over (transport.HandOverConsumer)", e.who, e.queue, e.conn.t)
	}
	if total := e.policy.totalDelay(); total > maxInPlaceDelay {
		return fmt.Errorf("acemq: %s of %q is Ordered, and its retry policy waits %v in all; retries happen in place, holding the delivery unacked, so the total must stay under RabbitMQ's delivery timeout of %v (a longer wait closes the channel and redelivers the message): give fewer attempts or shorter delays",
			e.who, e.queue, total, maxInPlaceDelay)
	}
	return nil
}

// totalDelay is the sum of the waits between the policy's attempts.
func (p RetryPolicy) totalDelay() time.Duration {
	var total time.Duration
	for a := 2; a <= p.MaxAttempts; a++ {
		total += p.delayFor(a)
	}
	return total
}

// orderedTopology is what an ordered engine declares, the exchange first.
func (e *engine) orderedTopology() []Topology {
	q := e.cfg.quorum
	t := []Topology{Exchange{Name: e.queue, Kind: "x-consistent-hash", Args: map[string]any{"hash-header": hdrKey}}}
	for i := range e.cfg.order.Partitions {
		args := map[string]any{"x-single-active-consumer": true}
		if q {
			args["x-delivery-limit"] = int64(e.policy.MaxAttempts + 20)
			args["x-dead-letter-exchange"] = ""
			args["x-dead-letter-routing-key"] = DeadLetterQueue(e.queue)
		}
		name := PartitionQueue(e.queue, i)
		t = append(t, Queue{Name: name, Quorum: q, Args: args}, Binding{Exchange: e.queue, Key: "1", Queue: name})
	}
	t = append(t,
		Queue{Name: DeadLetterQueue(e.queue), Quorum: q},
		Queue{Name: ParkingQueue(e.queue), Quorum: q},
		membersTopology(e.queue),
		Queue{Name: blockedQueue(e.queue), Quorum: q},
	)
	for _, b := range e.cfg.bindings {
		t = append(t, ExchangeBinding{Source: b.Exchange, Key: b.Key, Destination: e.queue})
	}
	return t
}

// orderedLadder is every queue an ordered engine takes from or moves to
// that NoDeclare expects to find ({queue}.members is declared by the
// spreading).
func (e *engine) orderedLadder() []string {
	var names []string
	for i := range e.cfg.order.Partitions {
		names = append(names, PartitionQueue(e.queue, i))
	}
	return append(names, DeadLetterQueue(e.queue), ParkingQueue(e.queue), blockedQueue(e.queue))
}

// declareOrdered checks that the broker has no other partition count for
// the queue, then declares the ordered topology. A broker without the
// consistent-hash exchange gets an error that says how to enable it.
func (e *engine) declareOrdered(ctx context.Context) error {
	if err := e.checkPartitionCount(ctx); err != nil {
		return err
	}
	err := e.conn.t.Declare(ctx, e.orderedTopology()...)
	if err != nil && strings.Contains(err.Error(), "rabbitmq-plugins enable") {
		// The transport named the plugin and the command already.
		return fmt.Errorf("acemq: declaring the exchange %q of ordered %s %q: %w", e.queue, e.who, e.queue, err)
	}
	if err != nil && strings.Contains(strings.ToLower(err.Error()), "exchange type") {
		return fmt.Errorf("acemq: declaring the exchange %q of ordered %s %q: the broker has no x-consistent-hash exchange type; enable the plugin rabbitmq_consistent_hash_exchange (rabbitmq-plugins enable rabbitmq_consistent_hash_exchange): %w",
			e.queue, e.who, e.queue, err)
	}
	if err != nil {
		return fmt.Errorf("acemq: declaring the queues of ordered %s %q: %w", e.who, e.queue, err)
	}
	return nil
}

// checkPartitionCount fails when the queue was declared with another
// number of partitions: if {queue}.p0 exists, {queue}.p{P-1} must too and
// {queue}.p{P} must not. The error names the count the broker has.
func (e *engine) checkPartitionCount(ctx context.Context) error {
	p := e.cfg.order.Partitions
	exists := func(i int) (bool, error) {
		_, err := e.conn.t.Inspect(ctx, PartitionQueue(e.queue, i))
		switch {
		case errors.Is(err, transport.ErrNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("acemq: %s of %q: looking for queue %q: %w", e.who, e.queue, PartitionQueue(e.queue, i), err)
		}
		return true, nil
	}
	first, err := exists(0)
	if err != nil || !first {
		return err
	}
	last, err := exists(p - 1)
	if err != nil {
		return err
	}
	beyond, err := exists(p)
	if err != nil {
		return err
	}
	if last && !beyond {
		return nil
	}
	n := p - 1
	if !last {
		for n > 0 {
			ok, err := exists(n - 1)
			if err != nil {
				return err
			}
			if ok {
				break
			}
			n--
		}
	} else {
		n = p + 1
		for n < maxPartitions+1 {
			ok, err := exists(n)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			n++
		}
	}
	return fmt.Errorf("acemq: %s of %q asks for %d partitions, but the queue was declared with %d (%s to %s exist); the count is fixed once declared: give Partitions %d, or delete the partition queues and the exchange %q first (their messages with them)",
		e.who, e.queue, p, n, PartitionQueue(e.queue, 0), PartitionQueue(e.queue, n-1), n, e.queue)
}

// Partitions returns the partitions this instance holds now, in order:
// none before Run or after it returned, and none for a consumer that is
// not Ordered.
func (c *Consumer[T]) Partitions() []int { return c.e.partitions() }

// Partitions returns the partitions this instance of the router holds
// now, as Consumer.Partitions does.
func (r *Router) Partitions() []int {
	if r == nil || r.e == nil {
		return nil
	}
	return r.e.partitions()
}

func (e *engine) partitions() []int {
	o := e.ordered.Load()
	if o == nil {
		return nil
	}
	return o.heldNow()
}

// keyOf returns the ordering key in a delivery's headers, or "".
func keyOf(h map[string]any) string {
	switch k := h[hdrKey].(type) {
	case string:
		return k
	case []byte:
		return string(k)
	}
	return ""
}

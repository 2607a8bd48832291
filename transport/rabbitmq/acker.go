package rabbitmq

import (
	"fmt"
	"sort"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Settlement states of a handed-out delivery.
const (
	pending uint8 = iota
	acked
	nacked
	requeued
	released // given up unsettled: never sent, left for the channel's close
)

type ackEntry struct {
	tag   uint64
	state uint8
	sent  bool // settled on the wire out of order, ahead of the run
}

// consumerChannel is one consumer channel's acknowledger. Deliveries record
// their settlement here; the consume loop alone writes them to the broker
// (flush), so acks and nacks leave in an order the broker accepts, and a
// contiguous run of acks leaves as one basic.ack with multiple=true.
//
// It is the transport.Acknowledger of every delivery it handed out. Once its
// channel is gone it refuses them all: their tags mean nothing on any other
// channel, and the broker redelivers those messages.
type consumerChannel struct {
	queue string
	ch    *amqp.Channel
	tag   string // the consumer tag
	// cancels receives the tag when the broker cancels the consumer
	// (basic.cancel), just before amqp091 closes its deliveries.
	cancels <-chan string
	gen     uint64
	gone    <-chan struct{} // closed when the connection is lost or closed
	// spill is how many settled-but-unsent entries may wait behind an
	// unsettled one before they are sent one by one, so a slow delivery
	// cannot hold the prefetch window shut.
	spill int
	// handOver marks a ConsumeHandOver's channel, whose deliveries may be
	// released.
	handOver bool

	mu sync.Mutex
	// single is set once a delivery was released: an ack with
	// multiple=true would settle it too, so every later ack goes alone.
	single  bool
	dead    bool
	entries []ackEntry // handed out and not yet sent, in tag order
	open    int        // handed out and not yet settled by the application
	wake    chan struct{}
}

func newConsumerChannel(queue string, ch *amqp.Channel, s *session, prefetch int) *consumerChannel {
	spill := prefetch / 2
	if prefetch <= 0 {
		spill = 512
	}
	return &consumerChannel{queue: queue, ch: ch, gen: s.gen, gone: s.done, spill: max(spill, 1), wake: make(chan struct{}, 1)}
}

// handOut records a delivery about to be given to the application.
func (c *consumerChannel) handOut(tag uint64) {
	c.mu.Lock()
	c.entries = append(c.entries, ackEntry{tag: tag})
	c.open++
	c.mu.Unlock()
}

// Ack records that the delivery tagged tag was handled; the consume loop
// sends it. It fails once the channel the delivery came on is gone.
func (c *consumerChannel) Ack(tag uint64) error { return c.settle(tag, acked) }

// Nack records that the delivery tagged tag was not handled, to be requeued
// or dropped (dead-lettered) by the broker. It fails once the channel the
// delivery came on is gone.
func (c *consumerChannel) Nack(tag uint64, requeue bool) error {
	if requeue {
		return c.settle(tag, requeued)
	}
	return c.settle(tag, nacked)
}

// Release records that the delivery tagged tag is given up unsettled: it
// counts as settled while a ConsumeHandOver waits, and nothing is sent, so
// the broker requeues it when the channel closes. It fails on a delivery
// of Consume, and once the channel is gone.
func (c *consumerChannel) Release(tag uint64) error {
	if !c.handOver {
		return fmt.Errorf("rabbitmq: delivery %d from queue %q cannot be released: it was not handed out by ConsumeHandOver", tag, c.queue)
	}
	return c.settle(tag, released)
}

func (c *consumerChannel) settle(tag uint64, state uint8) error {
	c.mu.Lock()
	if c.dead || c.lost() {
		c.mu.Unlock()
		return fmt.Errorf("rabbitmq: delivery %d from queue %q is stale: the channel it came on (connection %d) is gone, and the broker redelivers it", tag, c.queue, c.gen)
	}
	i := sort.Search(len(c.entries), func(i int) bool { return c.entries[i].tag >= tag })
	if i == len(c.entries) || c.entries[i].tag != tag || c.entries[i].state != pending {
		c.mu.Unlock()
		return fmt.Errorf("rabbitmq: delivery %d from queue %q was already settled", tag, c.queue)
	}
	c.entries[i].state = state
	c.open--
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// lost reports that the channel or its connection is gone, before the
// consume loop has noticed.
func (c *consumerChannel) lost() bool {
	select {
	case <-c.gone:
		return true
	default:
		return c.ch.IsClosed()
	}
}

// unsettled reports how many handed-out deliveries the application has not
// settled; a dead channel has none.
func (c *consumerChannel) unsettled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

// kill marks the channel gone: every delivery it handed out counts as
// settled from now on, and their Ack and Nack fail.
func (c *consumerChannel) kill() {
	c.mu.Lock()
	c.dead = true
	c.entries = nil
	c.open = 0
	c.mu.Unlock()
}

type wireOp struct {
	tag      uint64
	state    uint8
	multiple bool
}

// flush writes what the application settled: the settled run at the head
// as multiple acks and multiple requeues, one frame for each stretch of
// either (other nacks are sent singly, in place), and, when too many
// settled entries wait behind an unsettled one, those one by one. Only the
// consume loop calls it.
func (c *consumerChannel) flush() error {
	for _, op := range c.plan() {
		var err error
		switch op.state {
		case acked:
			err = c.ch.Ack(op.tag, op.multiple)
		case nacked:
			err = c.ch.Nack(op.tag, false, false)
		case requeued:
			err = c.ch.Nack(op.tag, op.multiple, true)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// plan takes what is ready to be written off the entries, in wire order.
// A multiple ack or requeue is used only at the head, where every earlier
// delivery is settled and sent, so it covers nothing else; RabbitMQ
// requeues a stretch in one step, where one nack a message costs a classic
// queue of persistent messages milliseconds each (10,000 requeued singly
// took 32 s on 3.10, in one frame 0.5 s).
func (c *consumerChannel) plan() []wireOp {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return nil
	}
	var ops []wireOp
	var run, back uint64 // the last unsent ack, or requeue, of the current stretch
	end := func() {
		if run != 0 {
			ops = append(ops, wireOp{tag: run, state: acked, multiple: true})
		}
		if back != 0 {
			ops = append(ops, wireOp{tag: back, state: requeued, multiple: true})
		}
		run, back = 0, 0
	}
	i := 0
	for ; i < len(c.entries) && c.entries[i].state != pending; i++ {
		e := c.entries[i]
		switch {
		case e.sent:
		case e.state == released:
			end()
			c.single = true
		case c.single && (e.state == acked || e.state == requeued):
			ops = append(ops, wireOp{tag: e.tag, state: e.state})
		case e.state == acked:
			if back != 0 {
				end()
			}
			run = e.tag
		case e.state == requeued:
			if run != 0 {
				end()
			}
			back = e.tag
		default:
			end()
			ops = append(ops, wireOp{tag: e.tag, state: e.state})
		}
	}
	end()
	c.entries = c.entries[i:]
	if len(c.entries) > c.spill {
		for j := range c.entries {
			e := &c.entries[j]
			if e.state == released {
				c.single = true
				e.sent = true // nothing to send, ever
				continue
			}
			if e.state != pending && !e.sent {
				ops = append(ops, wireOp{tag: e.tag, state: e.state})
				e.sent = true
			}
		}
	}
	return ops
}

package acemq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/acemq/acemq/transport"
)

// BatchHandler handles a batch of decoded deliveries at once and says what
// should become of each: one Ack per message, in the batch's order. A nil
// result means every message is Done. A result of another length, or a
// panic, retries every message of the batch (see NewBatchConsumer).
//
// ctx carries the whole batch: WhenSettled given ctx runs its callback once
// for every message of the batch, as each one settles. A Send with ctx
// takes no correlation from the batch (there is no one message it answers);
// give CorrelationID and CausationID yourself when they matter.
type BatchHandler[T any] func(ctx context.Context, batch []*Message[T]) []Ack

// The defaults of BatchSize and BatchWait, and the largest BatchSize: a
// batch never holds more than the broker may hand out unsettled, and
// RabbitMQ's prefetch stops at 65535.
const (
	DefaultBatchSize = 100
	DefaultBatchWait = 100 * time.Millisecond
	maxBatchSize     = maxPrefetch
)

// batchConfig is what BatchSize and BatchWait set.
type batchConfig struct {
	size int
	wait time.Duration
}

// BatchSize sets the most messages a batch consumer hands its handler at
// once. The default is DefaultBatchSize (100); n outside 1 to 65535 fails
// NewBatchConsumer. It is a BatchConsumerOption: NewConsumer and NewRouter
// do not compile with it.
func BatchSize(n int) BatchConsumerOption {
	return batchOptionFunc(func(c *consumerConfig) {
		if n < 1 || n > maxBatchSize {
			c.errs = append(c.errs, fmt.Errorf("BatchSize(%d): want 1 to %d", n, maxBatchSize))
			return
		}
		c.batch.size = n
	})
}

// BatchWait sets the longest a batch waits, after its first message
// arrived, for more: once it has passed, the handler gets the messages
// there are. The default is DefaultBatchWait (100ms); d of 0 or less fails
// NewBatchConsumer. It is a BatchConsumerOption: NewConsumer and NewRouter
// do not compile with it.
func BatchWait(d time.Duration) BatchConsumerOption {
	return batchOptionFunc(func(c *consumerConfig) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("BatchWait(%v): want more than 0", d))
			return
		}
		c.batch.wait = d
	})
}

// batching is the first option NewBatchConsumer applies: it makes the
// configuration a batch consumer's, with the defaults.
func batching() ConsumerOption {
	return plainOptionFunc(func(c *consumerConfig) {
		c.batch = &batchConfig{size: DefaultBatchSize, wait: DefaultBatchWait}
	})
}

// batchChecked is the last option NewBatchConsumer applies: it sets the
// default prefetch, room for two batches per worker, and checks what only
// the options together can say.
func batchChecked() ConsumerOption {
	return plainOptionFunc(func(c *consumerConfig) {
		size := c.batch.size
		switch {
		case c.prefetch == 0:
			c.prefetch = min(maxPrefetch, max(64, 2*size*c.concurrency))
		case c.prefetch < size:
			c.errs = append(c.errs, fmt.Errorf("Prefetch(%d) is below BatchSize(%d): no batch could fill (leave Prefetch out for the default, 2 × BatchSize × Concurrency)", c.prefetch, size))
		}
	})
}

// NewBatchConsumer returns a consumer of queue that hands h batches of up
// to BatchSize T values (default 100): a batch goes to the handler once it
// is full, once BatchWait (default 100ms) has passed since its first
// message arrived, or at once when Run is stopping. It declares what
// NewConsumer declares, takes the same types and every AnyConsumerOption
// NewConsumer takes, with BatchSize and BatchWait besides (Ordered does
// not compile here: batch consumers keep no per-key order in this
// version), and returns a *Consumer[T], so Run, Pause, Resume and Queue
// work as for any consumer.
//
// Each message goes through the consume interceptors, the checks and the
// decode on its own, before its batch reaches the handler: a message an
// interceptor refuses, one of a type the consumer does not take, or one
// whose body does not decode settles alone (dead-lettered or parked) and
// is not in the batch. After the handler, each message settles on its
// own, by the Ack at its index, through the same path as NewConsumer's:
// the retry ladder, {queue}.dlq, {queue}.parked, the outcomes, WhenSettled,
// OnSettled, the metrics and the kill switch count message by message, so
// one poison message ends in {queue}.dlq alone while the rest are acked. A
// nil result means all Done. A result of another length, or a panic,
// retries every message of the batch, with a reason that says which.
//
// Concurrency(n) runs up to n batches at once. Prefetch defaults to
// 2 × BatchSize × Concurrency (at least 64, at most 65535), so the next
// batches fill while the handler works; a Prefetch below BatchSize fails.
// The acks of a batch are contiguous, so the RabbitMQ transport sends
// them as few basic.ack frames with multiple set. The histogram
// acemq.consume.batch.size records the size of each batch handed to h;
// acemq.consume.duration records, for each of its messages, the time h
// took over the whole batch.
//
// When Run stops, the batch being gathered (topped up, to BatchSize at
// most, with the deliveries the transport had already handed over) goes to
// the handler at once and settles before Run returns; deliveries
// prefetched beyond it go back to the queue. Pause and the kill switch put
// the batch being gathered back to the queue, unhandled, and let the
// batches in the handler settle. So does Conn.Close, which ends the
// handlers' contexts: after it no batch starts.
func NewBatchConsumer[T any](c *Conn, queue string, h BatchHandler[T], opts ...BatchConsumerOption) (*Consumer[T], error) {
	switch {
	case c == nil:
		return nil, errors.New("acemq: NewBatchConsumer was given a nil Conn")
	case queue == "":
		return nil, errors.New("acemq: NewBatchConsumer was given an empty queue name")
	case h == nil:
		return nil, fmt.Errorf("acemq: NewBatchConsumer of %q was given a nil handler", queue)
	}
	all := make([]ConsumerOption, 0, len(opts)+2)
	all = append(all, batching())
	for _, o := range opts {
		if o != nil {
			all = append(all, plainOptionFunc(o.applyBatchConsumer))
		}
	}
	all = append(all, batchChecked())
	r := &typedRoute[T]{batch: h, name: typeName[T]()}
	e, err := newEngine(c, queue, "batch consumer", all, r)
	if err != nil {
		return nil, err
	}
	takeTypes[T](e, r)
	return &Consumer[T]{e: e}, nil
}

// batchServer is the typed part of a batch consumer: it decodes prepared
// deliveries, runs the handler on those that decoded and settles each.
type batchServer interface {
	serveBatch(ctx context.Context, e *engine, items []batchItem)
}

// batchItem is a delivery that passed prepare: its state, which is also
// its own context (with its WhenSettled callbacks).
type batchItem struct {
	d  *transport.Delivery // in the batch the gatherer made
	ds *delivery
}

// batchContext is a BatchHandler's context: its parent plus the batch's
// deliveries, on each of which WhenSettled registers.
type batchContext struct {
	context.Context
	members []*delivery
}

// Value returns the batch for deliveryKey and asks the parent otherwise.
func (b *batchContext) Value(key any) any {
	if key == (deliveryKey{}) {
		return b
	}
	return b.Context.Value(key)
}

func (r *typedRoute[T]) serveBatch(ctx context.Context, e *engine, items []batchItem) {
	msgs := make([]*Message[T], 0, len(items))
	kept := items[:0] // those that decoded, in place
	for _, it := range items {
		m, v, ok := decodeMessage[T](it.ds, e, *it.d, r.name)
		if !ok {
			e.settle(it.ds, *it.d, v, -1, plainFate{})
			continue
		}
		msgs = append(msgs, m)
		kept = append(kept, it)
	}
	if len(msgs) == 0 {
		return
	}
	members := make([]*delivery, len(kept))
	for i, it := range kept {
		members[i] = it.ds
	}
	bctx := &batchContext{Context: ctx, members: members}
	vs, seconds := r.runBatch(bctx, e, msgs)
	for i, it := range kept {
		e.settle(it.ds, *it.d, vs[i], seconds, plainFate{})
	}
}

// runBatch hands msgs to the batch handler and returns a verdict per message and the
// handler's time in seconds.
func (r *typedRoute[T]) runBatch(ctx context.Context, e *engine, msgs []*Message[T]) ([]verdict, float64) {
	e.conn.metrics.batchSize.Record(ctx, float64(len(msgs)), e.conn.metrics.attributes(e.queue, "").record...)
	start := nowNano()
	slot := e.busy.begin(start, msgs[0].Envelope.ID)
	acks, p := guard(func() []Ack { return r.batch(ctx, msgs) })
	e.busy.end(slot)
	seconds := sinceSeconds(start)
	vs := make([]verdict, len(msgs))
	var whole error // what makes the whole batch retry
	switch {
	case p != nil:
		e.logPanic(p, "ids", batchIDs(msgs))
		whole = fmt.Errorf("the batch handler panicked: %v", p.value)
	case acks != nil && len(acks) != len(msgs):
		whole = fmt.Errorf("the batch handler returned %d Acks for a batch of %d (want one per message, or nil for all Done)", len(acks), len(msgs))
		e.conn.cfg.logger.Error("acemq: a batch handler returned the wrong number of Acks; the whole batch is retried",
			"queue", e.queue, "acks", len(acks), "messages", len(msgs), "ids", batchIDs(msgs))
	}
	for i, m := range msgs {
		switch {
		case whole != nil:
			vs[i] = e.judge(m.Envelope, Retry(whole), nil)
			vs[i].ack = Ack{} // the handler's answer was not usable
		case acks == nil:
			vs[i] = e.judge(m.Envelope, Done(), nil)
		default:
			vs[i] = e.judge(m.Envelope, acks[i], nil)
		}
	}
	return vs, seconds
}

// batchIDs are the message IDs of a batch, for the log.
func batchIDs[T any](msgs []*Message[T]) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.Envelope.ID
	}
	return ids
}

// processBatch takes a batch of deliveries from parse to settlement: each
// through prepare, alone, then those that passed to the handler together.
func (m *batchMode) processBatch(ctx context.Context, ds []transport.Delivery) {
	items := make([]batchItem, 0, len(ds))
	for i := range ds {
		st, r, _ := m.e.prepare(ctx, ds[i], plainFate{})
		if r == nil {
			continue // settled alone
		}
		items = append(items, batchItem{d: &ds[i], ds: st})
	}
	if len(items) > 0 {
		m.server.serveBatch(ctx, m.e, items)
	}
}

// batchMode is a batch consumer's: a plain consumer's queues, and a
// gatherer that makes batches of the deliveries for Concurrency batch
// workers.
type batchMode struct {
	plainMode
	server batchServer
}

// subscribe runs one subscription: the gatherer takes the deliveries until
// the subscription ends and makes batches of them (see batchGatherer), and
// the workers handle the batches.
func (m *batchMode) subscribe(s subscription) (bool, error) {
	return m.e.consumeJobs(s, func(wg *sync.WaitGroup, jobs <-chan job, workers int) {
		batches := make(chan []transport.Delivery)
		for range workers {
			wg.Go(func() {
				for b := range batches {
					m.processBatch(s.handlerCtx, b)
				}
			})
		}
		g := newBatchGatherer(m.e.cfg.batch.size, m.e.cfg.batch.wait)
		wg.Go(func() {
			defer close(batches)
			g.run(jobs, batches, s)
		})
	})
}

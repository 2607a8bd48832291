package acemq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/acemq/acemq/transport"
	"go.opentelemetry.io/otel/metric"
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
	maxBatchSize     = 65535
)

// batchConfig is what BatchSize and BatchWait set.
type batchConfig struct {
	size int
	wait time.Duration
}

// BatchSize sets the most messages a batch consumer hands its handler at
// once. The default is DefaultBatchSize (100); n must be from 1 to 65535.
// It is an option of NewBatchConsumer only: NewConsumer and NewRouter
// refuse it.
func BatchSize(n int) ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		switch {
		case c.batch == nil:
			c.errs = append(c.errs, errors.New("BatchSize is an option of NewBatchConsumer, not of NewConsumer or NewRouter"))
		case n < 1 || n > maxBatchSize:
			c.errs = append(c.errs, fmt.Errorf("BatchSize(%d): want 1 to %d", n, maxBatchSize))
		default:
			c.batch.size = n
		}
	})
}

// BatchWait sets the longest a batch waits, after its first message
// arrived, for more: once it has passed, the handler gets the messages
// there are. The default is DefaultBatchWait (100ms); d must be above
// zero. It is an option of NewBatchConsumer only: NewConsumer and
// NewRouter refuse it.
func BatchWait(d time.Duration) ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		switch {
		case c.batch == nil:
			c.errs = append(c.errs, errors.New("BatchWait is an option of NewBatchConsumer, not of NewConsumer or NewRouter"))
		case d <= 0:
			c.errs = append(c.errs, fmt.Errorf("BatchWait(%v): want more than 0", d))
		default:
			c.batch.wait = d
		}
	})
}

// batching is the first option NewBatchConsumer applies: it makes the
// configuration a batch consumer's, with the defaults.
func batching() ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		c.batch = &batchConfig{size: DefaultBatchSize, wait: DefaultBatchWait}
	})
}

// batchChecked is the last option NewBatchConsumer applies: it sets the
// default prefetch, room for two batches per worker, and checks what only
// the options together can say.
func batchChecked() ConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		size := c.batch.size
		switch {
		case c.prefetch == 0:
			c.prefetch = min(maxBatchSize, max(64, 2*size*c.concurrency))
		case c.prefetch < size:
			c.errs = append(c.errs, fmt.Errorf("Prefetch(%d) is below BatchSize(%d): no batch could fill (leave Prefetch out for the default, 2 × BatchSize × Concurrency)", c.prefetch, size))
		}
		if c.order != nil {
			c.errs = append(c.errs, errors.New("Ordered cannot be given to NewBatchConsumer: batch consumers keep no per-key order in this version (use NewConsumer with Ordered)"))
		}
	})
}

// NewBatchConsumer returns a consumer of queue that hands h batches of up
// to BatchSize T values (default 100): a batch goes to the handler once it
// is full, once BatchWait (default 100ms) has passed since its first
// message arrived, or at once when Run is stopping. It declares what
// NewConsumer declares, takes the same options and the same types, and
// returns a *Consumer[T], so Run, Pause, Resume and Queue work as for any
// consumer.
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
// batches in the handler settle.
func NewBatchConsumer[T any](c *Conn, queue string, h BatchHandler[T], opts ...ConsumerOption) (*Consumer[T], error) {
	switch {
	case c == nil:
		return nil, errors.New("acemq: NewBatchConsumer was given a nil Conn")
	case queue == "":
		return nil, errors.New("acemq: NewBatchConsumer was given an empty queue name")
	case h == nil:
		return nil, fmt.Errorf("acemq: NewBatchConsumer of %q was given a nil handler", queue)
	}
	all := make([]ConsumerOption, 0, len(opts)+2)
	all = append(append(append(all, batching()), opts...), batchChecked())
	sizes, err := c.metrics.meter.Float64Histogram("acemq.consume.batch.size",
		metric.WithDescription("Messages in each batch handed to a batch handler."),
		metric.WithUnit("{message}"))
	if err != nil {
		return nil, fmt.Errorf("acemq: batch consumer of %q: creating its histogram: %w", queue, err)
	}
	e, err := newEngine(c, queue, "batch consumer", all)
	if err != nil {
		return nil, err
	}
	r := &batchRoute[T]{handler: h, name: typeName[T](), sizes: sizes}
	takeTypes[T](e, r)
	e.batch = r
	return &Consumer[T]{e: e}, nil
}

// batchServer is the typed part of a batch consumer: it decodes prepared
// deliveries, runs the handler on those that decoded and settles each.
type batchServer interface {
	serveBatch(ctx context.Context, e *engine, items []batchItem)
}

// batchItem is a delivery that passed prepare: its own context (with its
// WhenSettled callbacks) and state.
type batchItem struct {
	ctx context.Context
	d   *transport.Delivery // in the batch the gatherer made
	ds  *delivery
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

// batchRoute is a BatchHandler[T] with what it takes to decode for it.
type batchRoute[T any] struct {
	handler BatchHandler[T]
	name    string // T's name, for reasons
	sizes   metric.Float64Histogram
}

// serve handles one delivery as a batch of one. The engine's batch path
// calls serveBatch instead; serve is what makes a batchRoute a route, so
// the type checks pick it as they pick a Handler's.
func (r *batchRoute[T]) serve(ctx context.Context, e *engine, d transport.Delivery, env *Envelope) (verdict, float64) {
	m := &Message[T]{Envelope: env, Queue: e.queue, Redelivered: d.Redelivered}
	if err := e.conn.decode(ctx, d.ContentType, d.Body, &m.Payload, r.name); err != nil {
		return verdict{outcome: OutcomeParked, reason: err.Error()}, -1
	}
	vs, seconds := r.run(ctx, e, []*Message[T]{m})
	return vs[0], seconds
}

func (r *batchRoute[T]) serveBatch(ctx context.Context, e *engine, items []batchItem) {
	msgs := make([]*Message[T], 0, len(items))
	kept := items[:0] // those that decoded, in place
	for _, it := range items {
		m := &Message[T]{Envelope: it.ds.env, Queue: e.queue, Redelivered: it.d.Redelivered}
		if err := e.conn.decode(it.ctx, it.d.ContentType, it.d.Body, &m.Payload, r.name); err != nil {
			e.settle(it.ctx, *it.d, it.ds, verdict{outcome: OutcomeParked, reason: err.Error()}, -1)
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
	vs, seconds := r.run(bctx, e, msgs)
	for i, it := range kept {
		e.settle(it.ctx, *it.d, it.ds, vs[i], seconds)
	}
}

// run hands msgs to the handler and returns a verdict per message and the
// handler's time in seconds.
func (r *batchRoute[T]) run(ctx context.Context, e *engine, msgs []*Message[T]) ([]verdict, float64) {
	r.sizes.Record(ctx, float64(len(msgs)), e.conn.metrics.attributes(e.queue, "").record...)
	start := nowNano()
	acks, panicked := r.call(ctx, msgs)
	seconds := sinceSeconds(start)
	vs := make([]verdict, len(msgs))
	var whole error // what makes the whole batch retry
	switch {
	case panicked != nil:
		whole = fmt.Errorf("the batch handler panicked: %v", panicked)
	case acks != nil && len(acks) != len(msgs):
		whole = fmt.Errorf("the batch handler returned %d Acks for a batch of %d (want one per message, or nil for all Done)", len(acks), len(msgs))
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

// call runs the handler, turning a panic into its value.
func (r *batchRoute[T]) call(ctx context.Context, msgs []*Message[T]) (acks []Ack, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	return r.handler(ctx, msgs), nil
}

// processBatch takes a batch of deliveries from parse to settlement: each
// through prepare, alone, then those that passed to the handler together.
func (e *engine) processBatch(ctx context.Context, ds []transport.Delivery) {
	items := make([]batchItem, 0, len(ds))
	for i := range ds {
		dctx, st, r := e.prepare(ctx, ds[i])
		if r == nil {
			continue // settled alone
		}
		items = append(items, batchItem{ctx: dctx, d: &ds[i], ds: st})
	}
	if len(items) > 0 {
		e.batch.serveBatch(ctx, e, items)
	}
}

// startBatches starts, in wg, a batch consumer's side of a subscription:
// the gatherer, which takes jobs until subscribe closes it and makes
// batches of them, and the workers that handle the batches.
func (e *engine) startBatches(wg *sync.WaitGroup, jobs <-chan job, workers int, consumeCtx, stopCtx, takeCtx, handlerCtx context.Context) {
	batches := make(chan []transport.Delivery)
	for range workers {
		wg.Go(func() {
			for b := range batches {
				e.processBatch(handlerCtx, b)
			}
		})
	}
	wg.Go(func() {
		defer close(batches)
		e.gather(jobs, batches, consumeCtx, stopCtx, takeCtx)
	})
}

// gather makes batches of the jobs and hands each to a free worker: when
// it is full, when BatchWait has passed since its first delivery, or at
// once when the taking has ended (Run stopping, a probe's few taken), with
// the deliveries already handed over to it. It keeps gathering while every
// worker is busy, up to BatchSize.
//
// When Run stops, the batch being gathered is the last: it is handed over
// with what the transport had already handed out, up to BatchSize, and
// every delivery after it goes back to the queue. When the subscription is
// stopped without Run stopping (Pause, the kill switch), the batch being
// gathered goes back to the queue, unhandled, and so does every delivery
// that arrives after the stop.
func (e *engine) gather(jobs <-chan job, batches chan<- []transport.Delivery, consumeCtx, stopCtx, takeCtx context.Context) {
	size, wait := e.cfg.batch.size, e.cfg.batch.wait
	var (
		cur      []transport.Delivery
		due      bool // BatchWait has passed since cur's first delivery
		ending   bool // the taking has ended: hand cur over at once
		lastSent bool // Run is stopping and its last batch was handed over
		stopped  = stopCtx.Done()
		taking   = takeCtx.Done()
		timer    = time.NewTimer(wait)
	)
	timer.Stop()
	defer timer.Stop()
	putBack := func() {
		for _, d := range cur {
			_ = d.Nack(true) // gathered, not started: back to the queue
		}
		cur = nil
	}
	// runStopping: Run's ctx (or the Conn's Shutdown) ended the
	// subscription, rather than Pause or the kill switch.
	runStopping := func() bool { return stopCtx.Err() != nil && consumeCtx.Err() != nil }
	for {
		// Read before the select: a batch counts as the last only if Run
		// was stopping when it was offered, not when a worker took it.
		last := runStopping()
		in := jobs
		if len(cur) >= size {
			in = nil
		}
		var out chan<- []transport.Delivery
		if len(cur) > 0 && (len(cur) >= size || due || ending && len(jobs) == 0) {
			out = batches
		}
		select {
		case j, ok := <-in:
			if !ok { // the subscription has ended
				if len(cur) > 0 {
					if stopCtx.Err() != nil && !runStopping() {
						putBack()
					} else {
						batches <- cur
					}
				}
				return
			}
			if !j.take || stopCtx.Err() != nil && (!runStopping() || lastSent) {
				_ = j.d.Nack(true) // after a stop, or past a probe's few: back to the queue
				continue
			}
			if cur == nil {
				cur = make([]transport.Delivery, 0, min(size, 128))
			}
			cur = append(cur, j.d)
			if len(cur) == 1 {
				due = false
				timer.Reset(wait)
			}
		case out <- cur:
			cur = nil
			timer.Stop()
			lastSent = last
		case <-timer.C:
			due = true
		case <-taking:
			taking, ending = nil, true
		case <-stopped:
			stopped, ending = nil, true
			if !runStopping() {
				putBack() // Pause or the kill switch
			}
		}
	}
}

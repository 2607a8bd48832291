package acemq

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/acemq/acemq/transport"
)

// sendBatch publishes every message of msgs whose result has no error yet,
// as fresh messages (sendRendered with moved unset).
func (c *Conn) sendBatch(ctx context.Context, msgs []RawMessage, results []PublishResult) {
	c.sendRendered(ctx, msgs, results, false)
}

// sendRendered publishes every message of msgs whose result has no error
// yet, pipelined, and awaits their confirms together, writing each outcome
// into results. moved is render's: whether the envelope's Error travels. A transport that implements transport.BatchPublisher gets them
// all in one call (the RabbitMQ transport puts them in flight from this
// goroutine and fills its confirm window); any other is called from a pool
// of goroutines.
func (c *Conn) sendRendered(ctx context.Context, msgs []RawMessage, results []PublishResult, moved bool) {
	idx := make([]int, 0, len(msgs))
	wire := make([]transport.Message, 0, len(msgs))
	for i := range msgs {
		if results[i].Err == nil {
			idx = append(idx, i)
			m := &msgs[i]
			w := render(m.Envelope, m.Exchange, m.RoutingKey, m.ContentType, m.Body, moved)
			if err := c.intoDelay(ctx, m.Envelope, &w); err != nil {
				results[i].Err = err
				idx = idx[:len(idx)-1]
				continue
			}
			wire = append(wire, w)
		}
	}
	if len(wire) == 0 {
		return
	}
	start := nowNano() // every body is encoded: the publish clock starts here
	if bp := c.caps.batch; bp != nil {
		errs := bp.PublishBatch(ctx, wire)
		if len(errs) != len(wire) { // a transport's bug: no message may pass as confirmed
			// published adds the prefix and the message.
			short := fmt.Errorf("the transport answered %d of a batch of %d: the rest were not confirmed", len(errs), len(wire))
			errs = make([]error, len(wire))
			for j := range errs {
				errs[j] = short
			}
		}
		for j := range wire {
			results[idx[j]].Err = c.published(ctx, wire[j], start, errs[j])
		}
		return
	}
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range min(len(wire), batchWorkers) {
		wg.Go(func() {
			for j := int(next.Add(1) - 1); j < len(wire); j = int(next.Add(1) - 1) {
				results[idx[j]].Err = c.publish(ctx, wire[j], start)
			}
		})
	}
	wg.Wait()
}

// batchWorkers bounds the goroutines publishing one batch on a transport
// without PublishBatch: enough to keep a confirm window full.
var batchWorkers = max(256, 64*runtime.GOMAXPROCS(0))

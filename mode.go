package acemq

import (
	"context"
	"fmt"
	"sync"

	"github.com/acemq/acemq/transport"
)

// deliveryMode is how an engine takes its deliveries: what it declares
// and expects to find, and one subscription. The engine (run, the pause
// state, the routing table) and the settle core (settle.go) are the same
// for every mode: plainMode, batchMode and orderedMode.
type deliveryMode interface {
	// topology is what the constructor declares; ladder every queue a
	// delivery is taken from or moved to, which NoDeclare expects to find.
	topology() []Topology
	ladder() []string
	// declare declares the topology; checkDeclared checks, with NoDeclare,
	// what the ladder's queues alone do not say. label prefixes the
	// engine's kind in errors ("ordered ").
	declare(ctx context.Context) error
	checkDeclared(ctx context.Context) error
	label() string
	// subscribe runs one subscription until it ends and reports whether
	// run should subscribe again (see engine.subscribe).
	subscribe(s subscription) (more bool, err error)
	// checkKind fails when the broker has the queue's name as the other
	// kind, plain or ordered (onekind.go).
	checkKind(ctx context.Context) error
	// admit is the mode's own check of a delivery, after the envelope and
	// the size: ok false with the verdict that settles it otherwise.
	admit(d transport.Delivery, env *Envelope) (v verdict, ok bool)
	// held is the partitions this instance holds now, in order (nil for
	// a mode without partitions); subscribed the queues whose transport
	// subscriptions say whether the engine consumes (Health).
	held() []int
	subscribed() []string
}

// subscription is one subscription's contexts, as engine.subscribe made
// them.
type subscription struct {
	consumeCtx context.Context    // ends when Run stops (or the Conn stops consuming)
	stopCtx    context.Context    // ends when the subscription stops: Run, Pause, the kill switch
	takeCtx    context.Context    // ends when the taking stops: any of those, or a probe's few taken
	handlerCtx context.Context    // ends only when the Conn closes
	stopTaking context.CancelFunc // ends takeCtx
	probe      bool               // a kill switch probe: probeDeliveries deliveries
}

// plainMode is a Consumer's or a Router's: the queue, its retry tiers,
// .dlq and .parked, and Concurrency workers, each handling one delivery at
// a time.
type plainMode struct{ e *engine }

func (m plainMode) label() string                                       { return "" }
func (m plainMode) checkDeclared(context.Context) error                 { return nil }
func (m plainMode) admit(transport.Delivery, *Envelope) (verdict, bool) { return verdict{}, true }
func (m plainMode) held() []int                                         { return nil }
func (m plainMode) subscribed() []string                                { return []string{m.e.queue} }

func (m plainMode) declare(ctx context.Context) error {
	if err := m.e.conn.t.Declare(ctx, m.topology()...); err != nil {
		return fmt.Errorf("acemq: declaring the queues of %s %q: %w", m.e.who, m.e.queue, err)
	}
	return nil
}

func (m plainMode) subscribe(s subscription) (bool, error) {
	return m.e.consumeJobs(s, func(wg *sync.WaitGroup, jobs <-chan job, workers int) {
		for range workers {
			wg.Go(func() {
				for j := range jobs {
					if !j.take || s.stopCtx.Err() != nil {
						_ = j.d.Nack(true) // prefetched, not started: back to the queue
						continue
					}
					m.e.process(s.handlerCtx, j.d, plainFate{})
				}
			})
		}
	})
}

// consumeJobs consumes the queue for one subscription (a probe's few, or
// in full), handing the deliveries as jobs to the workers start starts in
// wg, and returns once the workers are done.
func (e *engine) consumeJobs(s subscription, start func(wg *sync.WaitGroup, jobs <-chan job, workers int)) (bool, error) {
	prefetch, workers := e.cfg.prefetch, e.cfg.concurrency
	if s.probe {
		prefetch, workers = min(prefetch, probeDeliveries), min(workers, probeDeliveries)
	}
	jobs := make(chan job, prefetch)
	var wg sync.WaitGroup
	start(&wg, jobs, workers)
	taken := 0
	err := e.conn.t.Consume(s.takeCtx, e.queue, prefetch, func(d transport.Delivery) {
		taken++
		if s.probe && taken >= probeDeliveries {
			s.stopTaking() // a probe is this many deliveries
		}
		jobs <- job{d: d, take: !s.probe || taken <= probeDeliveries}
	})
	close(jobs)
	wg.Wait()
	return err == nil && s.takeCtx.Err() != nil, err
}

package acemq

import (
	"time"

	"github.com/acemq/acemq/transport"
)

// gatherState is where a batch consumer's gatherer stands in one
// subscription.
type gatherState int

const (
	// gathering: jobs go into the batch, which is handed over when it is
	// full or BatchWait has passed since its first delivery.
	gathering gatherState = iota
	// flushing: the taking ended (a probe's few were taken) while Run goes
	// on: the batch is handed over as soon as the jobs already handed out
	// are in it.
	flushing
	// finishing: Run is stopping: the batch being gathered is topped up,
	// to BatchSize at most, with the jobs the transport had already handed
	// out, and handed over as the last.
	finishing
	// draining: nothing more is gathered: every job goes back to the
	// queue. The last batch handed over, Pause, the kill switch and
	// Conn.Close (which ends the handlers' context) all lead here.
	draining
)

// batchGatherer makes batches of a subscription's jobs: the state, the
// batch being gathered and the transitions between them. run drives it
// from the subscription's channels; the transitions themselves touch no
// channel, so a table can test them.
type batchGatherer struct {
	size  int
	wait  time.Duration
	state gatherState
	cur   []transport.Delivery // the batch being gathered
	due   bool                 // BatchWait has passed since cur's first delivery
}

func newBatchGatherer(size int, wait time.Duration) *batchGatherer {
	return &batchGatherer{size: size, wait: wait}
}

// stop is the subscription stopping: runStopping says Run (or the Conn's
// Shutdown) stopped it, rather than Pause or the kill switch. It returns
// what goes back to the queue: the batch being gathered, after a Pause.
func (g *batchGatherer) stop(runStopping bool) (back []transport.Delivery) {
	switch {
	case g.state == draining || g.state == finishing:
		return nil
	case runStopping:
		g.state = finishing
		return nil
	}
	return g.abort()
}

// abort is Pause, the kill switch or Conn.Close: the batch being gathered
// goes back to the queue, returned, and no batch starts any more (after
// Close its handler's context has ended already).
func (g *batchGatherer) abort() (back []transport.Delivery) {
	back, g.cur, g.due = g.cur, nil, false
	g.state = draining
	return back
}

// takingEnded is the taking ending while the subscription goes on (a
// probe's few taken).
func (g *batchGatherer) takingEnded() {
	if g.state == gathering {
		g.state = flushing
	}
}

// accepting reports whether run should read a job now: not while the
// batch is full (unless every job goes back anyway).
func (g *batchGatherer) accepting() bool { return g.state == draining || len(g.cur) < g.size }

// add takes job j into the batch, or reports back when it goes back to
// the queue (draining, or a job past a probe's few). first is true for the
// batch's first delivery: BatchWait starts.
func (g *batchGatherer) add(j job) (back, first bool) {
	if g.state == draining || !j.take {
		return true, false
	}
	if g.cur == nil {
		g.cur = make([]transport.Delivery, 0, min(g.size, 128))
	}
	g.cur = append(g.cur, j.d)
	if len(g.cur) == 1 {
		g.due = false
		return false, true
	}
	return false, false
}

// ready reports whether the batch is to be handed over now, buffered
// being the jobs handed out and not yet read.
func (g *batchGatherer) ready(buffered int) bool {
	if len(g.cur) == 0 {
		return false
	}
	switch g.state {
	case flushing, finishing:
		return len(g.cur) >= g.size || g.due || buffered == 0
	case gathering:
		return len(g.cur) >= g.size || g.due
	}
	return false
}

// sent is the batch taken by a worker. After the last one, nothing more
// is gathered.
func (g *batchGatherer) sent() {
	g.cur, g.due = nil, false
	if g.state == finishing {
		g.state = draining
	}
}

// closed is the subscription's jobs ending: the batch being gathered, if
// any, is to be handed over as the last (the subscription ended by
// itself, or Run stopped while it was being topped up).
func (g *batchGatherer) closed() (last []transport.Delivery) {
	last, g.cur = g.cur, nil
	g.state = draining
	if len(last) == 0 {
		return nil
	}
	return last
}

// run makes batches of jobs and hands each to a free worker on batches,
// until jobs is closed. It keeps gathering while every worker is busy, up
// to BatchSize. The contexts of s are read at the top of each turn, before
// anything is offered: a batch counts as the last only if Run was stopping
// when it was offered, not when a worker took it.
func (g *batchGatherer) run(jobs <-chan job, batches chan<- []transport.Delivery, s subscription) {
	timer := time.NewTimer(g.wait)
	timer.Stop()
	defer timer.Stop()
	stopped, taking, closing := s.stopCtx.Done(), s.takeCtx.Done(), s.handlerCtx.Done()
	observe := func() {
		if closing != nil && s.handlerCtx.Err() != nil {
			closing, stopped = nil, nil
			putBack(g.abort())
		}
		if stopped != nil && s.stopCtx.Err() != nil {
			stopped = nil
			putBack(g.stop(s.consumeCtx.Err() != nil))
		}
		if taking != nil && s.takeCtx.Err() != nil {
			taking = nil
			g.takingEnded()
		}
	}
	for {
		observe()
		in := jobs
		if !g.accepting() {
			in = nil
		}
		var out chan<- []transport.Delivery
		if g.ready(len(jobs)) {
			out = batches
		}
		select {
		case j, ok := <-in:
			if !ok { // the subscription has ended
				observe()
				last := g.closed()
				if last == nil {
					return
				}
				select {
				case batches <- last:
				case <-closing: // Conn.Close while it waited for a worker
					putBack(last)
				}
				return
			}
			back, first := g.add(j)
			switch {
			case back:
				_ = j.d.Nack(true) // after a stop, or past a probe's few: back to the queue
			case first:
				timer.Reset(g.wait)
			}
		case out <- g.cur:
			g.sent()
			timer.Stop()
		case <-timer.C:
			g.due = true
		case <-taking:
		case <-stopped:
		case <-closing:
		}
	}
}

// putBack returns gathered, unstarted deliveries to the queue.
func putBack(ds []transport.Delivery) {
	for _, d := range ds {
		_ = d.Nack(true)
	}
}

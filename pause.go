package acemq

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// pauser is an engine's pause state: Pause's, the kill switch's, and the
// subscription run must stop when either pauses it. Every field is guarded
// by mu.
type pauser struct {
	mu sync.Mutex

	manual      bool // paused by Pause, until Resume
	manualSince time.Time

	tripped      bool // paused by the kill switch, until a probe or Resume
	trippedSince time.Time
	tripFailures int
	probing      bool          // a probe subscription is (to be) running
	probeAt      time.Time     // when tripped and not probing: the next probe
	coolDown     time.Duration // the wait before the next probe
	probeOK      int           // probe deliveries that did not fail
	window       window

	// The running subscription: stop ends it and returns its prefetched,
	// unstarted deliveries; stopTaking only ends its taking. gen names it.
	gen        uint64
	stop       context.CancelFunc
	stopTaking context.CancelFunc

	changed chan struct{} // closed (and replaced) at each change
}

// taking is what run does next: how much it takes from the queue.
type taking int

const (
	takeAll   taking = iota // consume with the configured prefetch and workers
	takeProbe               // consume a probe's few deliveries
	takeNone                // take nothing until the state changes
)

// notifyLocked wakes run to look at the state again.
func (p *pauser) notifyLocked() {
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
}

// unlockThen unlocks p, then calls *log if set: the state's log lines are
// written outside the lock, since a log handler may well call Health.
func (p *pauser) unlockThen(log *func()) {
	p.mu.Unlock()
	if *log != nil {
		(*log)()
	}
}

// stopLocked ends the running subscription, if any, returning its
// prefetched deliveries.
func (p *pauser) stopLocked() {
	if p.stop != nil {
		p.stop()
	}
}

// next decides what run does now. For a subscription it records stop and
// stopTaking as the ones Pause and the kill switch end, and returns the
// subscription's gen; for a wait, the channel that closes at the next
// change and, when a probe is due, the time it is due.
func (e *engine) next(stop, stopTaking context.CancelFunc) (m taking, gen uint64, changed <-chan struct{}, probeAt time.Time) {
	p := &e.pause
	p.mu.Lock()
	var log func()
	defer p.unlockThen(&log)
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	switch {
	case p.manual:
		return takeNone, 0, p.changed, time.Time{}
	case p.tripped && !p.probing && time.Now().Before(p.probeAt):
		return takeNone, 0, p.changed, p.probeAt
	case p.tripped && !p.probing:
		p.probing, p.probeOK = true, 0
		log = func() {
			e.conn.cfg.logger.Info("acemq: the kill switch probes the consumer", "who", e.who, "queue", e.queue, "deliveries", probeDeliveries)
		}
	}
	m = takeAll
	if p.probing {
		m = takeProbe
	}
	p.gen++
	p.stop, p.stopTaking = stop, stopTaking
	return m, p.gen, nil, time.Time{}
}

// ended forgets the subscription gen, once it has returned.
func (e *engine) ended(gen uint64) {
	p := &e.pause
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen == gen {
		p.stop, p.stopTaking = nil, nil
	}
}

// startRun clears what a previous Run's kill switch left; a Pause stays.
func (e *engine) startRun() {
	p := &e.pause
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tripped, p.probing = false, false
	p.stop, p.stopTaking = nil, nil
	if e.cfg.killSwitch != nil {
		p.window = newWindow(e.cfg.killSwitch.Window)
	}
}

// pauseNow is Pause.
func (e *engine) pauseNow() {
	p := &e.pause
	p.mu.Lock()
	if p.manual {
		p.mu.Unlock()
		return
	}
	p.manual, p.manualSince = true, time.Now()
	p.stopLocked()
	p.notifyLocked()
	p.mu.Unlock()
	e.conn.cfg.logger.Info("acemq: the consumer was paused by Pause", "who", e.who, "queue", e.queue)
}

// resume is Resume.
func (e *engine) resume() {
	p := &e.pause
	p.mu.Lock()
	if !p.manual && !p.tripped {
		p.mu.Unlock()
		return
	}
	since := p.manualSince
	if !p.manual {
		since = p.trippedSince
	}
	if p.probing && p.stopTaking != nil {
		p.stopTaking() // the probe's deliveries finish, then run takes in full
	}
	p.manual, p.tripped, p.probing = false, false, false
	p.window.reset()
	p.notifyLocked()
	p.mu.Unlock()
	e.conn.cfg.logger.Info("acemq: the consumer was resumed by Resume", "who", e.who, "queue", e.queue,
		"paused_for", time.Since(since).Round(time.Millisecond))
}

// observe feeds a settled delivery to the kill switch: failed says it
// counts as a failure, ran that the handler ran. It may trip the switch,
// fail a probe or end one.
func (e *engine) observe(failed, ran bool) {
	ks := e.cfg.killSwitch
	if ks == nil {
		return
	}
	p := &e.pause
	p.mu.Lock()
	var log func()
	defer p.unlockThen(&log)
	switch {
	case p.manual:
		return
	case p.tripped && !p.probing:
		return // settling after the trip, before any probe
	case p.probing && failed:
		p.coolDown = min(timesSat(p.coolDown, 2), timesSat(ks.CoolDown, maxCoolDownFactor))
		p.probing, p.probeAt = false, time.Now().Add(p.coolDown)
		p.stopLocked()
		p.notifyLocked()
		wait := p.coolDown
		log = func() {
			e.conn.cfg.logger.Warn("acemq: a kill switch probe failed; the consumer stays paused",
				"who", e.who, "queue", e.queue, "next_probe_in", wait)
		}
	case p.probing && ran:
		p.probeOK++
		if p.probeOK < probeDeliveries {
			return
		}
		if p.stopTaking != nil {
			p.stopTaking()
		}
		p.tripped, p.probing = false, false
		p.window.reset()
		p.notifyLocked()
		pausedFor := time.Since(p.trippedSince).Round(time.Millisecond)
		log = func() {
			e.conn.cfg.logger.Info("acemq: the kill switch resumed the consumer after a probe succeeded",
				"who", e.who, "queue", e.queue, "paused_for", pausedFor)
		}
	case p.probing:
		return // the handler did not run: no evidence either way
	default:
		failures, total := p.window.add(nowNano(), failed)
		if !failed || !ks.trips(failures, total) {
			return
		}
		p.tripped, p.probing = true, false
		p.trippedSince, p.tripFailures = time.Now(), failures
		p.coolDown = ks.CoolDown
		p.probeAt = p.trippedSince.Add(p.coolDown)
		p.stopLocked()
		p.notifyLocked()
		log = func() {
			e.conn.cfg.logger.Warn("acemq: the kill switch paused the consumer",
				"who", e.who, "queue", e.queue, "failures", failures, "deliveries", total,
				"window", ks.Window, "first_probe_in", ks.CoolDown)
		}
	}
}

// paused reports whether the engine is paused, and if so how, in the words
// Health uses.
func (e *engine) paused() (bool, string) {
	p := &e.pause
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.manual:
		return true, fmt.Sprintf("%s of %q paused by Pause since %s", e.who, e.queue, stamp(p.manualSince))
	case p.tripped:
		s := fmt.Sprintf("%s of %q paused by the kill switch since %s after %d failures in %v",
			e.who, e.queue, stamp(p.trippedSince), p.tripFailures, e.cfg.killSwitch.Window)
		if p.probing {
			return true, s + "; probing"
		}
		return true, s + "; next probe at " + stamp(p.probeAt)
	}
	return false, ""
}

// timesSat is d×n, or the longest Duration when that overflows.
func timesSat(d time.Duration, n int64) time.Duration {
	if d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

// stamp is how Health writes a time.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

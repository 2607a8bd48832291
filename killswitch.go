package acemq

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// KillSwitchPolicy says when a consumer pauses by itself because its
// deliveries keep failing (a database it needs is down, say), and how it
// comes back. See KillSwitch.
type KillSwitchPolicy struct {
	// Window is the sliding window the failure share is measured over.
	// The default is 30s. It is kept in ten slices, so a failure leaves
	// the window between 0.9 and 1 Window after it settled.
	Window time.Duration
	// MinFailures is how many failures the window must hold before the
	// switch may trip. The default is 10.
	MinFailures int
	// Threshold is the share of failed deliveries, of all those settled in
	// the window, at which the switch trips: above 0, at most 1. The
	// default is 0.5.
	Threshold float64
	// CoolDown is how long the consumer stays paused before its first
	// probe. It doubles after each failed probe, up to 8×CoolDown. The
	// default is 30s (so the wait between probes is at most 4m).
	CoolDown time.Duration
}

// The defaults of KillSwitchPolicy's zero fields, the number of deliveries
// a probe takes, and the cap on the wait between probes, in CoolDowns.
const (
	defaultKillWindow      = 30 * time.Second
	defaultKillMinFailures = 10
	defaultKillThreshold   = 0.5
	defaultKillCoolDown    = 30 * time.Second
	probeDeliveries        = 3
	maxCoolDownFactor      = 8
)

// KillSwitch makes the consumer pause by itself when deliveries keep
// failing, rather than run every one of them up its retry ladder into
// {queue}.dlq while a dependency is down. A failure is a delivery the
// engine retried, one it dead-lettered because its attempts were spent,
// or a handler panic. Reject, Fatal (and Retry of a Fatal error), a
// missing Ack, parking and an interceptor's refusal are decisions about
// one message, not signs of an outage, and count only as deliveries.
//
// When, over the policy's Window, failures number at least MinFailures and
// make up at least Threshold of the deliveries settled, the switch trips:
// the consumer pauses as Pause does, and Health says so. After CoolDown it
// probes: it consumes again with a prefetch of at most 3, and resumes in
// full once 3 deliveries the handler ran have not failed. A probe delivery
// that fails ends the probe; the consumer waits twice as long as before (up to
// 8×CoolDown) and probes again. Resume ends a trip at once, without a
// probe. Each trip, failed probe and resume is logged.
//
// A zero field takes its default (see KillSwitchPolicy); a negative one,
// or a Threshold above 1, fails NewConsumer (and Router.Run).
func KillSwitch(p KillSwitchPolicy) AnyConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		p, err := p.normalize()
		if err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.killSwitch = &p
	})
}

// normalize fills defaults and checks the values. Its error has no prefix:
// newEngine adds the context.
func (p KillSwitchPolicy) normalize() (KillSwitchPolicy, error) {
	var errs []error
	if p.Window < 0 {
		errs = append(errs, fmt.Errorf("KillSwitchPolicy.Window is %v, want more than 0 (or 0 for the default, %v)", p.Window, defaultKillWindow))
	}
	if p.MinFailures < 0 {
		errs = append(errs, fmt.Errorf("KillSwitchPolicy.MinFailures is %d, want 1 or more (or 0 for the default, %d)", p.MinFailures, defaultKillMinFailures))
	}
	if math.IsNaN(p.Threshold) || p.Threshold < 0 || p.Threshold > 1 {
		errs = append(errs, fmt.Errorf("KillSwitchPolicy.Threshold is %v, want a share above 0 and at most 1 (or 0 for the default, %v)", p.Threshold, defaultKillThreshold))
	}
	if p.CoolDown < 0 {
		errs = append(errs, fmt.Errorf("KillSwitchPolicy.CoolDown is %v, want more than 0 (or 0 for the default, %v)", p.CoolDown, defaultKillCoolDown))
	}
	if len(errs) > 0 {
		return p, errors.Join(errs...)
	}
	if p.Window == 0 {
		p.Window = defaultKillWindow
	}
	if p.MinFailures == 0 {
		p.MinFailures = defaultKillMinFailures
	}
	if p.Threshold == 0 {
		p.Threshold = defaultKillThreshold
	}
	if p.CoolDown == 0 {
		p.CoolDown = defaultKillCoolDown
	}
	return p, nil
}

// trips reports whether failures of total deliveries trip the switch.
func (p *KillSwitchPolicy) trips(failures, total int) bool {
	return failures >= p.MinFailures && float64(failures) >= p.Threshold*float64(total)
}

// windowSlices is how many slices a window is kept in.
const windowSlices = 10

// window counts deliveries and failures over a sliding span of time, in
// slices: a slice older than the span is forgotten whole.
type window struct {
	width  int64 // of a slice, in nanoseconds
	slices [windowSlices]struct {
		n               int64 // the slice's number: its start / width
		total, failures int
	}
}

func newWindow(span time.Duration) window {
	return window{width: max(int64(span)/windowSlices, 1)}
}

// add counts one delivery settled at now (a nowNano reading) and returns
// the totals of the window that ends there.
func (w *window) add(now int64, failed bool) (failures, total int) {
	n := now / w.width
	s := &w.slices[n%windowSlices]
	if s.n != n {
		s.n, s.total, s.failures = n, 0, 0
	}
	s.total++
	if failed {
		s.failures++
	}
	for i := range w.slices {
		if s := &w.slices[i]; s.n > n-windowSlices && s.n <= n {
			failures += s.failures
			total += s.total
		}
	}
	return failures, total
}

// reset forgets everything counted.
func (w *window) reset() { *w = window{width: w.width} }

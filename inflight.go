package acemq

import (
	"fmt"
	"sync"
	"time"
)

// DefaultStuckAfter is how long a handler may hold a delivery before
// Health reports its consumer stuck, unless StuckAfter says otherwise.
//
// It is RabbitMQ's delivery timeout as 3.x releases first set it
// (consumer_timeout, 15 minutes; 30 on later ones), the bound an ordered
// consumer's retries in place already keep under. A handler that runs
// longer has, on those brokers, lost its delivery already: the broker
// closed the channel and gave the message to another consumer. From
// RabbitMQ 4.3 a classic queue no longer times a delivery out, so nothing
// but this takes such a handler's message back; and nothing shorter is a
// safe default, since a handler that legitimately takes minutes (a report,
// a transcode) must not make a healthy service look broken.
const DefaultStuckAfter = 15 * time.Minute

// StuckAfter sets how long a handler may hold one delivery (one call of
// the Handler, or of the BatchHandler for a whole batch) before the
// consumer is stuck: HealthReport shows it in StateStuck, naming the
// message and since when, and Health fails with ErrStuck until the call
// returns. The default is DefaultStuckAfter (15 minutes); d must be above
// zero. Raise it for handlers that run for long on purpose, or give
// Nonessential. How long the oldest call has run is in
// ConsumerHealth.InFlightFor and in the gauge acemq.consumer.oldest_inflight
// whatever the threshold. An ordered consumer's wait between attempts in
// place is not a handler's time and does not count.
func StuckAfter(d time.Duration) AnyConsumerOption {
	return consumerOptionFunc(func(c *consumerConfig) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("StuckAfter(%v): want more than 0", d))
			return
		}
		c.stuckAfter = d
	})
}

// inFlight is the handler calls an engine runs now, each with when it
// began and the message it holds (a batch's first), for the age of the
// oldest: Health's StuckAfter and acemq.consumer.oldest_inflight. Its slots
// are reused, so a call costs two short locks and no allocation once the
// engine has run as many calls at once as it ever will.
type inFlight struct {
	mu    sync.Mutex
	slots []inFlightSlot
	free  []int
}

type inFlightSlot struct {
	used  bool
	start int64 // nowNano
	id    string
}

// begin records a handler call that began at start holding message id,
// and returns its slot for end.
func (f *inFlight) begin(start int64, id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var i int
	if n := len(f.free); n > 0 {
		i, f.free = f.free[n-1], f.free[:n-1]
	} else {
		i = len(f.slots)
		f.slots = append(f.slots, inFlightSlot{})
	}
	f.slots[i] = inFlightSlot{used: true, start: start, id: id}
	return i
}

// end records that the call in slot i returned.
func (f *inFlight) end(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slots[i] = inFlightSlot{}
	f.free = append(f.free, i)
}

// oldest returns how long the oldest call has run at now (a nowNano
// reading), the message it holds and when it began; zeros when none runs.
func (f *inFlight) oldest(now int64) (age time.Duration, id string, began time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first := int64(-1)
	for _, s := range f.slots {
		if s.used && (first < 0 || s.start < first) {
			first, id = s.start, s.id
		}
	}
	if first < 0 {
		return 0, "", time.Time{}
	}
	return time.Duration(max(now-first, 0)), id, epoch.Add(time.Duration(first))
}

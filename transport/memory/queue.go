package memory

import (
	"maps"
	"sort"
	"time"

	"github.com/acemq/acemq/transport"
)

// queue is a FIFO of ready entries and the consumers competing for them. The
// broker's lock guards every field.
type queue struct {
	b    *Broker
	name string
	decl queueDecl // what it was declared with

	ready     deque[*entry] // in arrival order (entry.seq), also after returns
	seq       uint64        // the last arrival number given out
	consumers []*consumer   // active ones, in round-robin order
	rr        int           // the consumer to try first on the next dispatch
	dirty     bool          // listed in b.dirty
	deleted   bool

	timer   *time.Timer // expires the head; nil until a TTL'd message arrives
	timerAt int64       // when timer fires, unix nanoseconds; 0 when disarmed
}

// enqueueLocked appends e at the tail of q, stamping its expiry.
func (q *queue) enqueueLocked(e *entry, now int64) {
	e.q = q
	q.seq++
	e.seq = q.seq
	if q.decl.hasTTL {
		e.expires = now + int64(q.decl.ttl)
	}
	q.ready.pushBack(e)
	q.b.markDirtyLocked(q)
}

// requeueLocked puts e, which came back unsettled, back where it was in q
// (as a classic queue on RabbitMQ does), marked redelivered. On a quorum queue a return past the delivery limit
// dead-letters it instead.
func (q *queue) requeueLocked(e *entry) {
	e.c = nil
	if q.deleted {
		q.b.releaseLocked(e)
		return
	}
	e.redelivered = true
	if q.decl.quorum {
		e.returns++
		if e.returns > q.decl.deliveryLimit {
			q.deadLetterLocked(e, "delivery_limit")
			return
		}
	}
	q.putBackLocked(e)
	q.b.markDirtyLocked(q)
}

// putBackLocked puts e, which left q's ready entries, back in its place
// among them, so returns keep the queue's order whatever order they come
// back in.
func (q *queue) putBackLocked(e *entry) {
	i := sort.Search(q.ready.len(), func(i int) bool { return q.ready.at(i).seq > e.seq })
	q.ready.insert(i, e)
}

// dispatchLocked deals ready entries round-robin to consumers with room
// under their prefetch (on a single-active-consumer queue to the first
// consumer only), then expires what is due at the head and rearms the
// expiry timer for the new head. Dealing first lets a consumer with room
// take a message whose TTL is zero, as on RabbitMQ; the timer keeps anything
// from waiting past its expiry for longer than the timer's own lag.
func (q *queue) dispatchLocked() {
	n := len(q.consumers)
	if q.decl.sac {
		n = min(n, 1) // only the first subscribed is active
	}
	for q.ready.len() > 0 && n > 0 {
		var c *consumer
		for i := range n {
			cand := q.consumers[(q.rr+i)%n]
			if cand.hasRoom() {
				c = cand
				q.rr = (q.rr + i + 1) % n
				break
			}
		}
		if c == nil {
			break
		}
		c.inbox.pushBack(q.ready.popFront())
		c.wake()
	}
	if q.decl.hasTTL {
		q.expireLocked(time.Now().UnixNano())
		q.armLocked()
	}
}

// expireLocked drops or dead-letters the entries at the head whose TTL has
// run out by now. As on RabbitMQ, only the head expires: an entry behind a
// live one waits its turn.
func (q *queue) expireLocked(now int64) {
	for q.ready.len() > 0 && q.ready.front().expires <= now {
		q.deadLetterLocked(q.ready.popFront(), "expired")
	}
}

// armLocked makes the expiry timer fire when the head expires, or stops it
// when nothing is ready.
func (q *queue) armLocked() {
	if q.ready.len() == 0 {
		if q.timer != nil && q.timerAt != 0 {
			q.timer.Stop()
			q.timerAt = 0
		}
		return
	}
	at := q.ready.front().expires
	if q.timerAt != 0 && q.timerAt <= at {
		return // it fires in time already
	}
	d := time.Duration(at - time.Now().UnixNano())
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.onTimer)
	} else {
		q.timer.Reset(d)
	}
	q.timerAt = at
}

// onTimer runs on the timer's goroutine when the head is due to expire.
func (q *queue) onTimer() {
	b := q.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if q.deleted {
		return
	}
	q.timerAt = 0
	b.markDirtyLocked(q)
	b.flushLocked()
}

// stopLocked ends q's timer for good; q is being deleted.
func (q *queue) stopLocked() {
	if q.timer != nil {
		q.timer.Stop()
		q.timerAt = 0
	}
}

// deadLetterLocked takes e out of the broker and, when q names a dead-letter
// exchange, republishes its message there with the reason in x-*-death-*
// headers. A dead letter no queue takes is dropped, as is one that would
// reach again a queue it expired from without being rejected in between
// (RabbitMQ's cycle rule).
func (q *queue) deadLetterLocked(e *entry, reason string) {
	b := q.b
	if !q.decl.hasDLX {
		b.releaseLocked(e)
		return
	}
	ex, ok := b.exchanges[q.decl.dlx]
	if q.decl.dlx == "" {
		ex, ok = nil, true
	}
	if !ok {
		b.releaseLocked(e)
		return
	}
	m := e.msg
	if q.decl.hasDLRK {
		m.RoutingKey = q.decl.dlrk
	}
	m.Exchange = q.decl.dlx
	m.Headers = deathHeaders(e.msg.Headers, q.name, reason, e.msg.Exchange)

	var path []*queue
	if reason == "expired" {
		path = append(e.expiredFrom, q)
	}
	targets := b.routeLocked(ex, &m)
	now := time.Now().UnixNano()
	first := true
	for _, target := range targets {
		if containsQueue(path, target) {
			continue
		}
		ne := b.newEntryLocked(m, target)
		if !first {
			ne.msg.Headers = maps.Clone(m.Headers)
		}
		first = false
		if len(path) > 0 {
			ne.expiredFrom = append([]*queue(nil), path...)
		}
		target.enqueueLocked(ne, now)
	}
	b.releaseLocked(e)
}

// deathHeaders returns a copy of h recording that the message died in queue
// for reason, having been published to exchange.
func deathHeaders(h map[string]any, queue, reason, exchange string) map[string]any {
	out := make(map[string]any, len(h)+6)
	maps.Copy(out, h)
	if _, ok := out["x-first-death-queue"]; !ok {
		out["x-first-death-queue"] = queue
		out["x-first-death-reason"] = reason
		out["x-first-death-exchange"] = exchange
	}
	out["x-last-death-queue"] = queue
	out["x-last-death-reason"] = reason
	out["x-last-death-exchange"] = exchange
	return out
}

func containsQueue(qs []*queue, q *queue) bool {
	for _, x := range qs {
		if x == q {
			return true
		}
	}
	return false
}

// info reports q's ready messages and consumers. On a single-active-consumer
// quorum queue it counts the active one only, as RabbitMQ 3.10 does (its
// classic queues count the standbys too).
func (q *queue) info() transport.QueueInfo {
	n := len(q.consumers)
	if q.decl.sac && q.decl.quorum {
		n = min(n, 1)
	}
	return transport.QueueInfo{Name: q.name, Messages: q.ready.len(), Consumers: n}
}

// deque is a ring buffer that grows by doubling. Queues and consumer inboxes
// keep their entries in one, so a steady flow of messages allocates nothing.
// It is not safe for concurrent use; the broker's lock guards every deque.
type deque[T any] struct {
	buf  []T // len(buf) is zero or a power of two
	head int
	n    int
}

// len reports how many items the deque holds.
func (d *deque[T]) len() int { return d.n }

// grow makes room for one more item.
func (d *deque[T]) grow() {
	if d.n < len(d.buf) {
		return
	}
	size := 2 * len(d.buf)
	if size == 0 {
		size = 16
	}
	buf := make([]T, size)
	for i := range d.n {
		buf[i] = d.buf[(d.head+i)&(len(d.buf)-1)]
	}
	d.buf, d.head = buf, 0
}

// pushBack appends v at the tail.
func (d *deque[T]) pushBack(v T) {
	d.grow()
	d.buf[(d.head+d.n)&(len(d.buf)-1)] = v
	d.n++
}

// pushFront puts v at the head.
func (d *deque[T]) pushFront(v T) {
	d.grow()
	d.head = (d.head - 1) & (len(d.buf) - 1)
	d.buf[d.head] = v
	d.n++
}

// at returns the i'th item from the head; i must be below len.
func (d *deque[T]) at(i int) T { return d.buf[(d.head+i)&(len(d.buf)-1)] }

// insert puts v at position i (0 is the head, len the tail), moving the
// items on the shorter side of i by one.
func (d *deque[T]) insert(i int, v T) {
	if i >= d.n {
		d.pushBack(v)
		return
	}
	mask := func(j int) int { return j & (len(d.buf) - 1) }
	if i < d.n-i {
		d.pushFront(v) // the head moved one back: shift items 1..i down
		for j := 0; j < i; j++ {
			d.buf[mask(d.head+j)] = d.buf[mask(d.head+j+1)]
		}
		d.buf[mask(d.head+i)] = v
		return
	}
	d.pushBack(v) // shift items i..n-2 up by one
	for j := d.n - 1; j > i; j-- {
		d.buf[mask(d.head+j)] = d.buf[mask(d.head+j-1)]
	}
	d.buf[mask(d.head+i)] = v
}

// front returns the head without removing it; the deque must not be empty.
func (d *deque[T]) front() T { return d.buf[d.head] }

// popFront removes and returns the head; the deque must not be empty.
func (d *deque[T]) popFront() T {
	var zero T
	v := d.buf[d.head]
	d.buf[d.head] = zero
	d.head = (d.head + 1) & (len(d.buf) - 1)
	d.n--
	d.shrink()
	return v
}

// popBack removes and returns the tail; the deque must not be empty.
func (d *deque[T]) popBack() T {
	var zero T
	i := (d.head + d.n - 1) & (len(d.buf) - 1)
	v := d.buf[i]
	d.buf[i] = zero
	d.n--
	d.shrink()
	return v
}

// shrink lets go of a large buffer once the deque is empty, so a burst does
// not pin its memory.
func (d *deque[T]) shrink() {
	if d.n == 0 && len(d.buf) > 1024 {
		d.buf, d.head = nil, 0
	}
}

package ordering

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/acemq/acemq/internal/wire"
	"github.com/acemq/acemq/transport"
)

// BlockedKey is one key an ordered queue with BlockOnFailure has blocked:
// the message that failed for good, why, since when, and how many later
// messages of the key are held. The root's BlockedKey is its public face.
type BlockedKey struct {
	Key, MessageID, Reason string
	Since                  time.Time
	Held                   int
}

// registry is an ordered queue's blocked keys as this instance knows them.
// The broker holds them: one marker message per blocked key in
// {queue}.blocked, read (taken without an ack, then put back) and written
// only under the lease {queue}.blocked.lock, so instances never see half a
// change. The holder of a key's partition is the only one that blocks or
// unblocks it, so what it knows of its partitions' keys is exact.
type Registry struct {
	b      Broker
	queue  string
	quorum bool

	// ops serialises the reads and writes of every registry of this queue
	// on this transport (see opLock): a connection may take its own lease
	// again, so the lease alone does not keep two of them apart.
	ops *sync.Map

	mu       sync.RWMutex
	keys     map[string]marker
	declared map[string]bool // held queues declared by this instance
}

// marker is a blocked key, the partition it is in, and whether the
// queue's queues are quorum queues (so a re-run queue is declared alike).
type marker struct {
	BlockedKey
	partition int
	quorum    bool
}

// NewRegistry returns the registry of queue on b. ops holds, per queue,
// what serialises the registries of one connection (see opLock); the
// caller keeps one ops per transport. An entry lives only while a read or
// write of its queue runs or waits, so ops does not grow with the queues a
// long-lived connection has seen.
func NewRegistry(b Broker, ops *sync.Map, queue string, quorum bool) *Registry {
	return &Registry{b: b, queue: queue, quorum: quorum, ops: ops, keys: map[string]marker{}, declared: map[string]bool{}}
}

// opLock is the entry of one queue in a registry's ops: a mutex, and how
// many reads and writes hold it or wait for it. The last one out removes
// the entry (gone), and whoever finds a gone entry makes a new one.
type opLock struct {
	sync.Mutex
	guard sync.Mutex // guards users and gone
	users int
	gone  bool
}

// lockOp takes the queue's entry in ops, making it when there is none,
// and locks it; unlockOp undoes that.
func lockOp(ops *sync.Map, queue string) *opLock {
	for {
		v, _ := ops.LoadOrStore(queue, new(opLock))
		l, _ := v.(*opLock) // only this function stores in ops
		l.guard.Lock()
		if l.gone {
			l.guard.Unlock()
			continue
		}
		l.users++
		l.guard.Unlock()
		l.Lock()
		return l
	}
}

func unlockOp(ops *sync.Map, queue string, l *opLock) {
	l.Unlock()
	l.guard.Lock()
	defer l.guard.Unlock()
	if l.users--; l.users == 0 {
		l.gone = true
		ops.CompareAndDelete(queue, l)
	}
}

// IsBlocked reports whether key is blocked.
func (r *Registry) IsBlocked(key string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.keys[key]
	return ok
}

// Count is the number of blocked keys in the partitions holds says yes to.
func (r *Registry) Count(holds func(int) bool) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, m := range r.keys {
		if holds(m.partition) {
			n++
		}
	}
	return n
}

// Load reads the registry afresh.
func (r *Registry) Load(ctx context.Context) error { return r.change(ctx, nil, "") }

// block records key as blocked by message id for reason, replacing what
// the registry had for it.
func (r *Registry) block(ctx context.Context, key, id, reason string, partition int) error {
	return r.change(ctx, &marker{BlockedKey: BlockedKey{Key: key, MessageID: id, Reason: reason}, partition: partition, quorum: r.quorum}, "")
}

// unblock removes key's marker.
func (r *Registry) unblock(ctx context.Context, key string) error { return r.change(ctx, nil, key) }

// change reads every marker under the lock, publishes add (confirmed,
// Since stamped now) when given, then removes the markers of drop and puts
// the others back, and keeps what the registry now holds.
func (r *Registry) change(ctx context.Context, add *marker, drop string) error {
	op := lockOp(r.ops, r.queue)
	defer unlockOp(r.ops, r.queue, op)
	return r.locked(ctx, func() error {
		found := map[string][]transport.Delivery{}
		keys := map[string]marker{}
		var all []transport.Delivery
		defer func() {
			for _, d := range all {
				_ = d.Nack(true) // the acked ones were taken out
			}
		}()
		// Under the lock no other reader holds markers unacked, so the
		// ready count is the registry's size: an empty one costs no get (a
		// basic.get on a quorum queue electing a leader fails the whole
		// connection on RabbitMQ 3.10).
		info, err := r.b.T.Inspect(ctx, BlockedQueue(r.queue))
		if err != nil {
			return fmt.Errorf("reading the blocked keys of %q: %w", r.queue, err)
		}
		for n := 0; n < info.Messages; n++ {
			d, ok, err := r.b.T.Get(ctx, BlockedQueue(r.queue))
			if err != nil {
				return fmt.Errorf("reading the blocked keys of %q: %w", r.queue, err)
			}
			if !ok {
				break
			}
			all = append(all, d)
			m, ok := readMarker(d.Headers)
			if !ok {
				continue
			}
			found[m.Key] = append(found[m.Key], d)
			if old, ok := keys[m.Key]; !ok || m.Since.After(old.Since) {
				keys[m.Key] = m
			}
		}
		if add != nil {
			add.Since = time.Now().UTC()
			if err := r.b.T.Publish(ctx, add.message(r.queue)); err != nil {
				return fmt.Errorf("recording blocked key %q of %q: %w", add.Key, r.queue, err)
			}
		}
		if drop != "" {
			for _, d := range found[drop] {
				if err := d.Ack(); err != nil {
					return fmt.Errorf("removing blocked key %q of %q: %w", drop, r.queue, err)
				}
			}
			all = slices.DeleteFunc(all, func(d transport.Delivery) bool {
				return slices.ContainsFunc(found[drop], func(x transport.Delivery) bool { return x.Tag == d.Tag })
			})
			delete(keys, drop)
		}
		if add != nil {
			keys[add.Key] = *add
		}
		r.mu.Lock()
		r.keys = keys
		r.mu.Unlock()
		return nil
	})
}

// locked runs fn holding the registry's lease, waiting while another
// connection holds it. Each try is bounded, so a broker in trouble (a
// node going down) cannot hold a reader forever, and a long wait is
// logged with what the broker answered.
func (r *Registry) locked(ctx context.Context, fn func() error) error {
	l := r.b.Leaser
	if l == nil {
		return fmt.Errorf("the transport (%T) has no leases, which the blocked keys of %q need", r.b.T, r.queue)
	}
	start, warned := time.Now(), false
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		tctx, cancel := context.WithTimeout(ctx, lockTry)
		lease, err := l.Lease(tctx, blockedLock(r.queue))
		cancel()
		if err == nil {
			defer r.release(ctx, lease)
			return fn()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("locking the blocked keys of %q: %w", r.queue, ctx.Err())
		}
		if !errors.Is(err, transport.ErrLocked) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("locking the blocked keys of %q: %w", r.queue, err)
		}
		if !warned && time.Since(start) > lockPatience {
			warned = true
			r.b.logger().Warn("waiting for the lock of the blocked keys",
				"queue", r.queue, "lease", blockedLock(r.queue), "for", time.Since(start).Round(time.Millisecond), "error", err)
		}
		Sleep(ctx, pause/2+rand.N(pause))
	}
}

// How long one try for the registry's lease may take, and how long a
// reader waits for it before it says so in the log.
const (
	lockTry      = 10 * time.Second
	lockPatience = 10 * time.Second
)

// release gives the registry's lease up. A release that fails leaves the
// lease's queue to this connection, keeping every other instance out, so
// it is taken again (a connection may) and released again, a few times.
func (r *Registry) release(ctx context.Context, lease transport.Lease) {
	ctx = context.WithoutCancel(ctx)
	tctx, cancel := context.WithTimeout(ctx, lockTry)
	err := lease.Release(tctx)
	cancel()
	for try := 1; err != nil && try <= 4; try++ {
		Sleep(ctx, time.Duration(try)*100*time.Millisecond)
		tctx, cancel := context.WithTimeout(ctx, lockTry)
		var again transport.Lease
		if again, err = r.b.Leaser.Lease(tctx, blockedLock(r.queue)); err == nil {
			err = again.Release(tctx)
		}
		cancel()
	}
	if err != nil {
		r.b.logger().Warn("releasing the lock of the blocked keys failed; other instances wait until this connection takes and releases it again, or ends",
			"queue", r.queue, "lease", blockedLock(r.queue), "error", err)
	}
}

// declareHeld declares key's held queue, once per instance.
func (r *Registry) declareHeld(ctx context.Context, key string) error {
	r.mu.RLock()
	done := r.declared[key]
	r.mu.RUnlock()
	if done {
		return nil
	}
	if err := r.b.T.Declare(ctx, transport.Queue{Name: HeldQueue(r.queue, key), Quorum: r.quorum}); err != nil {
		return err
	}
	r.mu.Lock()
	r.declared[key] = true
	r.mu.Unlock()
	return nil
}

// message is the marker as it travels to {queue}.blocked.
func (m *marker) message(queue string) transport.Message {
	return transport.Message{
		RoutingKey: BlockedQueue(queue),
		MessageID:  uuid.NewString(),
		Timestamp:  m.Since.Truncate(time.Second),
		Headers: map[string]any{
			HeaderKey:       m.Key,
			hdrBlockedID:    m.MessageID,
			HeaderError:     m.Reason,
			hdrBlockedSince: m.Since.Format(time.RFC3339Nano),
			hdrPartition:    int64(m.partition),
			hdrQuorum:       m.quorum,
		},
	}
}

// readMarker reads a marker's headers; ok is false for anything else.
func readMarker(h map[string]any) (m marker, ok bool) {
	m.Key = KeyOf(h)
	if m.Key == "" {
		return m, false
	}
	m.MessageID, _ = h[hdrBlockedID].(string)
	m.Reason, _ = h[HeaderError].(string)
	if s, ok := h[hdrBlockedSince].(string); ok {
		m.Since, _ = time.Parse(time.RFC3339Nano, s)
	}
	if n, ok := wire.Int(h[hdrPartition]); ok {
		m.partition = int(n)
	}
	m.quorum, _ = h[hdrQuorum].(bool)
	return m, true
}

// isNotFound reports a queue that does not exist.
func isNotFound(err error) bool { return errors.Is(err, transport.ErrNotFound) }

// List returns the blocked keys, oldest first, each with how many
// messages its held queue has.
func (r *Registry) List(ctx context.Context) ([]BlockedKey, error) {
	if err := r.Load(ctx); err != nil {
		return nil, err
	}
	r.mu.RLock()
	out := make([]BlockedKey, 0, len(r.keys))
	for _, m := range r.keys {
		out = append(out, m.BlockedKey)
	}
	r.mu.RUnlock()
	for i := range out {
		k := &out[i]
		info, err := r.b.T.Inspect(ctx, HeldQueue(r.queue, k.Key))
		switch {
		case err == nil:
			k.Held = info.Messages
		case !isNotFound(err):
			return nil, fmt.Errorf("counting the held messages of key %q of %q: %w", k.Key, r.queue, err)
		}
	}
	slices.SortFunc(out, func(a, b BlockedKey) int { return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.Key, b.Key)) })
	return out, nil
}

// Blocked returns what the registry, read afresh, has for key: the ID of
// the message that blocked it and whether the queue's queues are quorum
// queues; ok is false when key is not blocked.
func (r *Registry) Blocked(ctx context.Context, key string) (id string, quorum, ok bool, err error) {
	if err := r.Load(ctx); err != nil {
		return "", false, false, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	m, ok := r.keys[key]
	return m.MessageID, m.quorum, ok, nil
}

// markerID is the ID of the message that blocked key, as this instance
// last read it, or "".
func (r *Registry) markerID(key string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.keys[key].MessageID
}

// Release puts a release of key on its way: a control message, confirmed,
// in the key's partition behind everything already there. With rerun (the
// ID of the message that blocked the key, already in RerunQueue) the
// holder runs that message first, then the held ones; with rerun empty it
// runs the held ones only. A key that is not blocked is an error.
func (r *Registry) Release(ctx context.Context, key, rerun string) error {
	if err := r.Load(ctx); err != nil {
		return err
	}
	if !r.IsBlocked(key) {
		return fmt.Errorf("key %q of queue %q is not blocked (acemq keys list %s shows the blocked ones)", key, r.queue, r.queue)
	}
	h := map[string]any{HeaderKey: key, HeaderControl: controlRelease}
	if rerun != "" {
		h[hdrRerun] = rerun
	}
	err := r.b.T.Publish(ctx, transport.Message{
		Exchange:  r.queue,
		MessageID: uuid.NewString(),
		Timestamp: time.Now().Truncate(time.Second).UTC(),
		Headers:   h,
	})
	if err != nil {
		return fmt.Errorf("releasing key %q of %q: %w", key, r.queue, err)
	}
	return nil
}

// KeyQueues names the queues an ordered queue made for its blocked keys,
// which no fixed list can: for each key its registry has blocked, the
// key's held queue and its re-run queue (made on demand: HeldQueue when a
// message of the key is first held, RerunQueue by a release with a
// re-run), whether or not each exists now. A key's queues are deleted
// before its marker is removed, so a key that is in none of the markers
// has none left. It names nothing when queue has no registry.
func KeyQueues(ctx context.Context, b Broker, ops *sync.Map, queue string) ([]string, error) {
	switch _, err := b.T.Inspect(ctx, BlockedQueue(queue)); {
	case isNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the blocked keys of %q: %w", queue, err)
	}
	r := NewRegistry(b, ops, queue, false)
	if err := r.Load(ctx); err != nil {
		if isNotFound(err) { // deleted meanwhile
			return nil, nil
		}
		return nil, err
	}
	r.mu.RLock()
	keys := slices.Sorted(maps.Keys(r.keys))
	r.mu.RUnlock()
	names := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		names = append(names, HeldQueue(queue, k), RerunQueue(queue, k))
	}
	return names, nil
}

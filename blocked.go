package acemq

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/acemq/acemq/internal/wire"
	"github.com/acemq/acemq/transport"
)

// BlockedKey is one key an ordered consumer with BlockOnFailure has
// blocked: the message that failed for good, why, since when, and how many
// later messages of the key are held.
type BlockedKey struct {
	Key, MessageID, Reason string
	Since                  time.Time
	Held                   int
}

// The headers of a marker in the blocked-key registry, besides x-acemq-key
// and x-acemq-error (the reason).
const (
	hdrBlockedID    = "x-acemq-blocked-id"
	hdrBlockedSince = "x-acemq-blocked-since"
	hdrPartition    = "x-acemq-partition"
	controlRelease  = "release"
)

// keyHash names a key's held queue: the first 16 hex digits of its
// SHA-256, so any key (up to 255 bytes of UTF-8) makes a short, plain name.
func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// registry is an ordered queue's blocked keys as this instance knows them.
// The broker holds them: one marker message per blocked key in
// {queue}.blocked, read (taken without an ack, then put back) and written
// only under the lease {queue}.blocked.lock, so instances never see half a
// change. The holder of a key's partition is the only one that blocks or
// unblocks it, so what it knows of its partitions' keys is exact.
type registry struct {
	conn   *Conn
	queue  string
	quorum bool

	// op serialises the reads and writes of every registry of this queue
	// on this transport: a connection may take its own lease again, so
	// the lease alone does not keep two of them apart.
	op *sync.Mutex

	mu       sync.RWMutex
	keys     map[string]marker
	declared map[string]bool // held queues declared by this instance
}

// marker is a blocked key and the partition it is in.
type marker struct {
	BlockedKey
	partition int
}

func newRegistry(c *Conn, queue string, quorum bool) *registry {
	op, _ := c.registryOps.LoadOrStore(queue, new(sync.Mutex))
	return &registry{conn: c, queue: queue, quorum: quorum, op: op.(*sync.Mutex), keys: map[string]marker{}, declared: map[string]bool{}}
}

// isBlocked reports whether key is blocked.
func (r *registry) isBlocked(key string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.keys[key]
	return ok
}

// count is the number of blocked keys in the partitions holds says yes to.
func (r *registry) count(holds func(int) bool) int {
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

// load reads the registry afresh.
func (r *registry) load(ctx context.Context) error { return r.change(ctx, nil, "") }

// block records key as blocked by message id for reason, replacing what
// the registry had for it.
func (r *registry) block(ctx context.Context, key, id, reason string, partition int) error {
	return r.change(ctx, &marker{BlockedKey: BlockedKey{Key: key, MessageID: id, Reason: reason}, partition: partition}, "")
}

// unblock removes key's marker.
func (r *registry) unblock(ctx context.Context, key string) error { return r.change(ctx, nil, key) }

// change reads every marker under the lock, publishes add (confirmed,
// Since stamped now) when given, then removes the markers of drop and puts
// the others back, and keeps what the registry now holds.
func (r *registry) change(ctx context.Context, add *marker, drop string) error {
	r.op.Lock()
	defer r.op.Unlock()
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
		info, err := r.conn.t.Inspect(ctx, blockedQueue(r.queue))
		if err != nil {
			return fmt.Errorf("acemq: reading the blocked keys of %q: %w", r.queue, err)
		}
		for n := 0; n < info.Messages; n++ {
			d, ok, err := r.conn.t.Get(ctx, blockedQueue(r.queue))
			if err != nil {
				return fmt.Errorf("acemq: reading the blocked keys of %q: %w", r.queue, err)
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
			if err := r.conn.t.Publish(ctx, add.message(r.queue)); err != nil {
				return fmt.Errorf("acemq: recording blocked key %q of %q: %w", add.Key, r.queue, err)
			}
		}
		if drop != "" {
			for _, d := range found[drop] {
				if err := d.Ack(); err != nil {
					return fmt.Errorf("acemq: removing blocked key %q of %q: %w", drop, r.queue, err)
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
func (r *registry) locked(ctx context.Context, fn func() error) error {
	l, ok := r.conn.t.(transport.Leaser)
	if !ok {
		return fmt.Errorf("acemq: the transport (%T) has no leases, which the blocked keys of %q need", r.conn.t, r.queue)
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
			return fmt.Errorf("acemq: locking the blocked keys of %q: %w", r.queue, ctx.Err())
		}
		if !errors.Is(err, transport.ErrLocked) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("acemq: locking the blocked keys of %q: %w", r.queue, err)
		}
		if !warned && time.Since(start) > lockPatience {
			warned = true
			r.conn.cfg.logger.Warn("acemq: waiting for the lock of the blocked keys",
				"queue", r.queue, "lease", blockedLock(r.queue), "for", time.Since(start).Round(time.Millisecond), "error", err)
		}
		sleepCtx(ctx, pause/2+rand.N(pause))
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
func (r *registry) release(ctx context.Context, lease transport.Lease) {
	ctx = context.WithoutCancel(ctx)
	tctx, cancel := context.WithTimeout(ctx, lockTry)
	err := lease.Release(tctx)
	cancel()
	for try := 1; err != nil && try <= 4; try++ {
		sleepCtx(ctx, time.Duration(try)*100*time.Millisecond)
		tctx, cancel := context.WithTimeout(ctx, lockTry)
		var again transport.Lease
		if again, err = r.conn.t.(transport.Leaser).Lease(tctx, blockedLock(r.queue)); err == nil {
			err = again.Release(tctx)
		}
		cancel()
	}
	if err != nil {
		r.conn.cfg.logger.Warn("acemq: releasing the lock of the blocked keys failed; other instances wait until this connection takes and releases it again, or ends",
			"queue", r.queue, "lease", blockedLock(r.queue), "error", err)
	}
}

// declareHeld declares key's held queue, once per instance.
func (r *registry) declareHeld(ctx context.Context, key string) error {
	r.mu.RLock()
	done := r.declared[key]
	r.mu.RUnlock()
	if done {
		return nil
	}
	if err := r.conn.t.Declare(ctx, Queue{Name: heldQueue(r.queue, key), Quorum: r.quorum}); err != nil {
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
		RoutingKey: blockedQueue(queue),
		MessageID:  newID(),
		Timestamp:  wireTime(m.Since),
		Headers: map[string]any{
			hdrKey:          m.Key,
			hdrBlockedID:    m.MessageID,
			hdrError:        m.Reason,
			hdrBlockedSince: m.Since.Format(time.RFC3339Nano),
			hdrPartition:    int64(m.partition),
		},
	}
}

// readMarker reads a marker's headers; ok is false for anything else.
func readMarker(h map[string]any) (m marker, ok bool) {
	m.Key = keyOf(h)
	if m.Key == "" {
		return m, false
	}
	m.MessageID, _ = h[hdrBlockedID].(string)
	m.Reason, _ = h[hdrError].(string)
	if s, ok := h[hdrBlockedSince].(string); ok {
		m.Since, _ = time.Parse(time.RFC3339Nano, s)
	}
	if n, ok := wire.Int(h[hdrPartition]); ok {
		m.partition = int(n)
	}
	return m, true
}

// isNotFound reports a queue that does not exist.
func isNotFound(err error) bool { return errors.Is(err, transport.ErrNotFound) }

// BlockedKeys lists the keys an ordered consumer of queue (with
// BlockOnFailure) has blocked, oldest first, each with the message that
// blocked it, the reason, since when and how many later messages are held.
// It reads the registry the consumers keep on the broker, so any Conn can
// ask, whether or not a consumer runs.
func BlockedKeys(ctx context.Context, c *Conn, queue string) ([]BlockedKey, error) {
	r, err := openRegistry(ctx, c, queue, "BlockedKeys")
	if err != nil {
		return nil, err
	}
	if err := r.load(ctx); err != nil {
		return nil, err
	}
	out := make([]BlockedKey, 0, len(r.keys))
	for _, m := range r.keys {
		k := m.BlockedKey
		info, err := c.t.Inspect(ctx, heldQueue(queue, k.Key))
		switch {
		case err == nil:
			k.Held = info.Messages
		case !isNotFound(err):
			return nil, fmt.Errorf("acemq: counting the held messages of key %q of %q: %w", k.Key, queue, err)
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b BlockedKey) int { return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.Key, b.Key)) })
	return out, nil
}

// ReleaseKey unblocks key of the ordered queue: its held messages are
// handled in order, by whichever instance holds the key's partition, before
// any newer message of the key. It returns once the release is on its way
// (a control message, confirmed, in the key's partition behind everything
// already there), not once the held messages are handled; BlockedKeys
// shows the key until then. A key that is not blocked is an error.
func ReleaseKey(ctx context.Context, c *Conn, queue, key string) error {
	if key == "" {
		return errors.New("acemq: ReleaseKey was given an empty key")
	}
	r, err := openRegistry(ctx, c, queue, "ReleaseKey")
	if err != nil {
		return err
	}
	if err := r.load(ctx); err != nil {
		return err
	}
	if !r.isBlocked(key) {
		return fmt.Errorf("acemq: key %q of queue %q is not blocked (acemq keys list %s shows the blocked ones)", key, queue, queue)
	}
	err = c.t.Publish(ctx, transport.Message{
		Exchange:  queue,
		MessageID: newID(),
		Timestamp: wireTime(time.Now()),
		Headers:   map[string]any{hdrKey: key, hdrControl: controlRelease},
	})
	if err != nil {
		return fmt.Errorf("acemq: releasing key %q of %q: %w", key, queue, err)
	}
	return nil
}

// openRegistry checks the arguments of BlockedKeys and ReleaseKey and
// that queue has a registry.
func openRegistry(ctx context.Context, c *Conn, queue, who string) (*registry, error) {
	switch {
	case c == nil:
		return nil, fmt.Errorf("acemq: %s was given a nil Conn", who)
	case queue == "":
		return nil, fmt.Errorf("acemq: %s was given an empty queue name", who)
	case c.closed.Load():
		return nil, ErrClosed
	}
	if _, err := c.t.Inspect(ctx, blockedQueue(queue)); err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("acemq: %s: queue %q has no blocked-key registry (%s); is it the queue of an ordered consumer?", who, queue, blockedQueue(queue))
		}
		return nil, fmt.Errorf("acemq: %s of %q: %w", who, queue, err)
	}
	return newRegistry(c, queue, false), nil
}

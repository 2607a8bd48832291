package acemq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq/internal/ordering"
)

// BlockedKey is one key an ordered consumer with BlockOnFailure has
// blocked: the message that failed for good, why, since when, and how many
// later messages of the key are held.
type BlockedKey struct {
	Key, MessageID, Reason string
	Since                  time.Time
	Held                   int
}

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
	keys, err := r.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("acemq: %w", err)
	}
	out := make([]BlockedKey, len(keys))
	for i, k := range keys {
		out[i] = BlockedKey(k)
	}
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
	if err := r.Release(ctx, key); err != nil {
		return fmt.Errorf("acemq: %w", err)
	}
	return nil
}

// openRegistry checks the arguments of BlockedKeys and ReleaseKey and
// that queue has a registry.
func openRegistry(ctx context.Context, c *Conn, queue, who string) (*ordering.Registry, error) {
	switch {
	case c == nil:
		return nil, fmt.Errorf("acemq: %s was given a nil Conn", who)
	case queue == "":
		return nil, fmt.Errorf("acemq: %s was given an empty queue name", who)
	case c.closed.Load():
		return nil, ErrClosed
	}
	if _, err := c.t.Inspect(ctx, ordering.BlockedQueue(queue)); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("acemq: %s: queue %q has no blocked-key registry (%s); is it the queue of an ordered consumer?", who, queue, ordering.BlockedQueue(queue))
		}
		return nil, fmt.Errorf("acemq: %s of %q: %w", who, queue, err)
	}
	b := ordering.Broker{T: c.t, Leaser: c.caps.leaser, HandOver: c.caps.handOver, Log: c.cfg.logger}
	return ordering.NewRegistry(b, &c.registryOps, queue, false), nil
}

package acemq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq/internal/ordering"
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

// ReleaseOption says what ReleaseKey does with the message that blocked
// the key: RerunFailed or SkipFailed (the default).
type ReleaseOption interface{ applyRelease(*releaseConfig) }

type releaseConfig struct{ rerun bool }

type releaseOptionFunc func(*releaseConfig)

func (f releaseOptionFunc) applyRelease(c *releaseConfig) { f(c) }

// RerunFailed makes ReleaseKey run the message that blocked the key again,
// first, before the held ones: it is taken from {queue}.dlq or
// {queue}.parked, wherever it went, with its attempts counted afresh.
func RerunFailed() ReleaseOption {
	return releaseOptionFunc(func(c *releaseConfig) { c.rerun = true })
}

// SkipFailed makes ReleaseKey run the held messages only, leaving the
// message that blocked the key where it went ({queue}.dlq or
// {queue}.parked). It is the default.
func SkipFailed() ReleaseOption {
	return releaseOptionFunc(func(c *releaseConfig) { c.rerun = false })
}

// ReleaseKey unblocks key of the ordered queue: its held messages are
// handled in order, by whichever instance holds the key's partition, before
// any newer message of the key. By default (SkipFailed) the message that
// blocked the key stays where it went; with RerunFailed it is moved first
// (published, confirmed, then acked) from {queue}.dlq or {queue}.parked to
// the key's re-run queue {queue}.rerun.{h}, and the holder runs it before
// the held ones; if it fails for good again, the key is blocked again by
// it and the held ones stay held. It returns once the release is on its
// way (a control message, confirmed, in the key's partition behind
// everything already there), not once the messages are handled;
// BlockedKeys shows the key until then. A key that is not blocked is an
// error, and so is a re-run of a message that is in none of those queues
// (replayed or purged already).
func ReleaseKey(ctx context.Context, c *Conn, queue, key string, opts ...ReleaseOption) error {
	var cfg releaseConfig
	for _, o := range opts {
		if o == nil {
			return errors.New("acemq: ReleaseKey was given a nil ReleaseOption")
		}
		o.applyRelease(&cfg)
	}
	if key == "" {
		return errors.New("acemq: ReleaseKey was given an empty key")
	}
	r, err := openRegistry(ctx, c, queue, "ReleaseKey")
	if err != nil {
		return err
	}
	id, quorum, ok, err := r.Blocked(ctx, key)
	if err != nil {
		return fmt.Errorf("acemq: %w", err)
	}
	if !ok {
		return fmt.Errorf("acemq: key %q of queue %q is not blocked (acemq keys list %s shows the blocked ones)", key, queue, queue)
	}
	rq := ordering.RerunQueue(queue, key)
	rerun := ""
	if cfg.rerun {
		if err := c.moveToRerun(ctx, queue, key, id, rq, quorum); err != nil {
			return err
		}
		rerun = id
	} else if info, err := c.t.Inspect(ctx, rq); err == nil && info.Messages > 0 {
		return fmt.Errorf("acemq: ReleaseKey: the message %s that blocked key %q of %q is in %s, from a release with a re-run that did not finish; release with RerunFailed to run it first", id, key, queue, rq)
	}
	if err := r.Release(ctx, key, rerun); err != nil {
		return fmt.Errorf("acemq: %w", err)
	}
	return nil
}

// moveToRerun puts message id, the one that blocked key, in the key's
// re-run queue rq, unless it is there already (a release with a re-run
// that stopped half way): it is looked for in {queue}.dlq, then in
// {queue}.parked, and moved as the engine moves a delivery, with its
// attempts counted afresh. The messages looked at before it stay unacked
// until the move is done, and then go back, in order.
func (c *Conn) moveToRerun(ctx context.Context, queue, key, id, rq string, quorum bool) error {
	if err := c.t.Declare(ctx, transport.Queue{Name: rq, Quorum: quorum}); err != nil {
		return fmt.Errorf("acemq: ReleaseKey: declaring the re-run queue %s of key %q: %w", rq, key, err)
	}
	places := []string{rq, DeadLetterQueue(queue), ParkingQueue(queue)}
	for _, from := range places {
		found, err := c.takeByID(ctx, from, id, func(d transport.Delivery) error {
			if from == rq {
				return d.Nack(true) // there already
			}
			env, err := EnvelopeOf(d.Message)
			if err != nil {
				_ = d.Nack(true)
				return fmt.Errorf("acemq: ReleaseKey: the message %s that blocked key %q is in %s, but cannot be re-run: %w", id, key, from, err)
			}
			env.Attempt, env.Error = 1, ""
			ackErr, err := c.relocate(ctx, render(env, "", rq, d.ContentType, d.Body, true), &d)
			if err != nil {
				_ = d.Nack(true)
				return fmt.Errorf("acemq: ReleaseKey: moving the message %s that blocked key %q from %s to %s: %w", id, key, from, rq, err)
			}
			if ackErr != nil {
				c.cfg.logger.Warn("acemq: acking a message moved for a re-run failed; it is also left where it was",
					"queue", from, "id", id, "error", ackErr)
			}
			return nil
		})
		if err != nil || found {
			return err
		}
	}
	return fmt.Errorf("acemq: ReleaseKey: the message %s that blocked key %q of %q is in none of %s (already replayed or purged?); release with SkipFailed to run the held messages without it",
		id, key, queue, strings.Join(places, ", "))
}

// takeByID looks through queue for the first message with ID id and
// passes it to fn, which settles it. The messages before it are kept
// unacked meanwhile and then given back, last first, so that they are
// where they were.
func (c *Conn) takeByID(ctx context.Context, queue, id string, fn func(transport.Delivery) error) (found bool, err error) {
	info, err := c.t.Inspect(ctx, queue)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("acemq: ReleaseKey: looking in %s: %w", queue, err)
	}
	var before []transport.Delivery
	defer func() {
		for i := len(before) - 1; i >= 0; i-- {
			_ = before[i].Nack(true)
		}
	}()
	for range info.Messages {
		d, ok, err := c.t.Get(ctx, queue)
		if err != nil {
			return false, fmt.Errorf("acemq: ReleaseKey: looking in %s: %w", queue, err)
		}
		if !ok {
			return false, nil
		}
		if d.MessageID == id {
			return true, fn(d)
		}
		before = append(before, d)
	}
	return false, nil
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

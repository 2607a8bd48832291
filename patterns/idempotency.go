package patterns

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq"
)

// IdempotencyStore remembers which message keys have been handled. Claim,
// Complete and Release must be safe for concurrent use, and Claim must be
// atomic: of two concurrent claims of a free key, exactly one gets Claimed.
// MemoryStore is one for a single process; outbox.NewInbox is one in a SQL
// database, shared by every process using it.
type IdempotencyStore interface {
	// Claim takes key for lease. It reports Claimed when the key was free
	// (or its last lease ran out), Duplicate when the key was completed and
	// is still kept, and InProgress when another claim's lease is running.
	Claim(ctx context.Context, key string, lease time.Duration) (ClaimResult, error)
	// Complete marks key handled and keeps it for keep, during which Claim
	// reports Duplicate.
	Complete(ctx context.Context, key string, keep time.Duration) error
	// Release gives up a claim, so the key can be claimed again at once. It
	// does not forget a completed key.
	Release(ctx context.Context, key string) error
}

// ClaimResult is what IdempotencyStore.Claim found.
type ClaimResult int

// The results of a Claim.
const (
	Claimed    ClaimResult = iota + 1 // the key is now the caller's, for the lease
	Duplicate                         // the key was handled already
	InProgress                        // someone else holds the key's lease
)

// String names the result: "claimed", "duplicate" or "in progress".
func (r ClaimResult) String() string {
	switch r {
	case Claimed:
		return "claimed"
	case Duplicate:
		return "duplicate"
	case InProgress:
		return "in progress"
	}
	return fmt.Sprintf("ClaimResult(%d)", int(r))
}

// IdempotencyOption configures WithIdempotency.
type IdempotencyOption interface{ applyIdempotency(*idempotencyConfig) }

type idempotencyOptionFunc func(*idempotencyConfig)

func (f idempotencyOptionFunc) applyIdempotency(c *idempotencyConfig) { f(c) }

type idempotencyConfig struct {
	key   func(*acemq.Envelope) string
	lease time.Duration
	keep  time.Duration
}

// Defaults of WithIdempotency.
const (
	DefaultLease = 30 * time.Second
	DefaultKeep  = 24 * time.Hour
)

// IdempotencyKey sets how a message's key is chosen. The default is its
// Envelope.ID. A key function returning "" dead-letters the message, since
// it cannot be guarded. A nil fn keeps the default.
func IdempotencyKey(fn func(*acemq.Envelope) string) IdempotencyOption {
	return idempotencyOptionFunc(func(c *idempotencyConfig) {
		if fn != nil {
			c.key = fn
		}
	})
}

// IdempotencyLease sets how long a claim holds a key while its handler runs
// (default DefaultLease, 30s). Make it longer than the handler ever takes:
// once it runs out another delivery of the key may run. A value of zero or
// less keeps the default.
func IdempotencyLease(d time.Duration) IdempotencyOption {
	return idempotencyOptionFunc(func(c *idempotencyConfig) {
		if d > 0 {
			c.lease = d
		}
	})
}

// IdempotencyKeep sets how long a handled key is remembered (default
// DefaultKeep, 24h): duplicates arriving later run again. A value of zero or
// less keeps the default.
func IdempotencyKeep(d time.Duration) IdempotencyOption {
	return idempotencyOptionFunc(func(c *idempotencyConfig) {
		if d > 0 {
			c.keep = d
		}
	})
}

// WithIdempotency runs the handler at most once per key (Envelope.ID by
// default) among the deliveries store sees, for as long as store keeps it:
//
//   - a key already handled is acked (Done) without running the handler;
//   - a key another worker is handling is retried after the lease
//     (RetryAfter), by which time that worker has finished or given up;
//   - a handler that ends with anything but Done, or panics, releases its
//     claim so the retry can run (the panic goes on to the engine, which
//     rejects the delivery);
//   - a Done is recorded with Complete before it is returned.
//
// A store that fails (Claim or Complete) turns into a Retry. After a failed
// Complete the claim stays until its lease runs out and the retry then
// runs the handler again: at least once, not exactly once. Handlers whose
// effects must never repeat record them in the store's own transaction
// (outbox.NewInbox).
//
// The claim is taken inside the handler chain, so after the consume
// interceptors have run.
func WithIdempotency[T any](store IdempotencyStore, opts ...IdempotencyOption) acemq.Middleware[T] {
	cfg := idempotencyConfig{key: envelopeID, lease: DefaultLease, keep: DefaultKeep}
	for _, o := range opts {
		if o != nil {
			o.applyIdempotency(&cfg)
		}
	}
	return func(next acemq.Handler[T]) acemq.Handler[T] {
		if store == nil {
			return func(context.Context, *acemq.Message[T]) acemq.Ack {
				return acemq.Retry(errNilStore)
			}
		}
		return func(ctx context.Context, m *acemq.Message[T]) acemq.Ack {
			return guard(ctx, store, &cfg, m, next)
		}
	}
}

var errNilStore = errors.New("patterns: WithIdempotency was given a nil store")

func envelopeID(e *acemq.Envelope) string { return e.ID }

// releaseTimeout bounds a Release made after the handler's ctx may have
// ended.
const releaseTimeout = 5 * time.Second

func guard[T any](ctx context.Context, store IdempotencyStore, cfg *idempotencyConfig, m *acemq.Message[T], next acemq.Handler[T]) acemq.Ack {
	key := cfg.key(m.Envelope)
	if key == "" {
		return acemq.AckOf(acemq.Fatal(fmt.Errorf("patterns: the idempotency key of message %s is empty", m.Envelope.ID)))
	}
	res, err := store.Claim(ctx, key, cfg.lease)
	if err != nil {
		return acemq.Retry(fmt.Errorf("patterns: claiming idempotency key %q: %w", key, err))
	}
	switch res {
	case Duplicate:
		return acemq.Done()
	case InProgress:
		return acemq.RetryAfter(cfg.lease, fmt.Errorf("patterns: idempotency key %q is being handled elsewhere", key))
	case Claimed:
	default:
		return acemq.Retry(fmt.Errorf("patterns: claiming idempotency key %q: the store answered %v", key, res))
	}

	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		// A release that fails leaves the lease to run out: the retry
		// meets InProgress and waits, nothing is lost.
		_ = store.Release(rctx, key)
	}
	defer func() {
		if r := recover(); r != nil {
			release()
			panic(r)
		}
	}()
	ack := next(ctx, m)
	if ack.String() != "done" {
		release()
		return ack
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := store.Complete(cctx, key, cfg.keep); err != nil {
		return acemq.Retry(fmt.Errorf("patterns: recording idempotency key %q as handled: %w", key, err))
	}
	return acemq.Done()
}

package patterns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/acemq/acemq"
)

// BisectOption configures Bisect.
type BisectOption interface{ applyBisect(*bisectConfig) }

type bisectOptionFunc func(*bisectConfig)

func (f bisectOptionFunc) applyBisect(c *bisectConfig) { f(c) }

type bisectConfig struct {
	splitIf func(error) bool
	logger  *slog.Logger
	errs    []error
}

// SplitIf makes Bisect split a failed part of the batch only when split
// returns true for the error; otherwise every message of that part gets
// acemq.AckOf(err) at once. Use it to tell a row the database refused (a
// constraint, a bad value: worth isolating) from an outage (the database
// is down: every half would fail too). The default splits on every error.
// A panic is always split.
func SplitIf(split func(err error) bool) BisectOption {
	return bisectOptionFunc(func(c *bisectConfig) {
		if split == nil {
			c.errs = append(c.errs, errors.New("SplitIf was given a nil function"))
			return
		}
		c.splitIf = split
	})
}

// BisectLogger sets where Bisect logs a message on which the function
// panicked, with the stack. The default is slog.Default().
func BisectLogger(l *slog.Logger) BisectOption {
	return bisectOptionFunc(func(c *bisectConfig) {
		if l == nil {
			c.errs = append(c.errs, errors.New("BisectLogger was given nil"))
			return
		}
		c.logger = l
	})
}

// Bisect turns fn, which handles a whole batch or none of it (one INSERT of
// every row, one transaction), into an acemq.BatchHandler that settles each
// message on its own: when fn fails on a batch, Bisect splits it in two
// halves and calls fn on each again, and so on down the halves that fail,
// until the messages fn refuses are alone.
//
//   - Every message of a call that returned nil is Done; fn never sees a
//     message again once a call with it succeeded.
//   - A message fn fails on alone gets acemq.AckOf(err) with fn's error:
//     retried down the consumer's ladder, or dead-lettered at once when
//     err is marked with acemq.Fatal, as a plain handler's error is.
//   - A panic in fn is recovered and split like an error; a message fn
//     panics on alone is rejected, reason `the handler rejected it:
//     patterns: the batch function panicked on this message alone: <value>`,
//     and the first such message of a batch is logged at Error with the
//     stack (BisectLogger).
//   - When ctx ends, Bisect calls fn no more: the messages not yet
//     settled are retried, with an error wrapping ctx's; none is lost,
//     none is acked unhandled.
//
// The cost: one call for a batch fn accepts. Otherwise, for a batch of n
// messages of which k fail on their own, at most 2·k·⌈log2 n⌉ extra calls,
// and never more than 2·(n−1): a part that failed calls its first half,
// and its second half only if the first failed too (if the first passed,
// the second is known to fail and is split without a call of its own). One
// bad row among 2,000 costs at most 22 extra calls (11 levels), 11 when
// it is the last row. fn is called on sub-slices of the batch, one at a
// time, in the batch's order; they are capped, so an append in fn copies.
//
// A nil fn or option makes every message retried with an error saying which.
func Bisect[T any](fn func(ctx context.Context, batch []*acemq.Message[T]) error, opts ...BisectOption) acemq.BatchHandler[T] {
	cfg := bisectConfig{splitIf: func(error) bool { return true }, logger: slog.Default()}
	for _, o := range opts {
		if o == nil {
			cfg.errs = append(cfg.errs, errors.New("a nil BisectOption was given"))
			continue
		}
		o.applyBisect(&cfg)
	}
	if fn == nil {
		cfg.errs = append(cfg.errs, errors.New("Bisect was given a nil function"))
	}
	bad := errors.Join(cfg.errs...)
	return func(ctx context.Context, batch []*acemq.Message[T]) []acemq.Ack {
		acks := make([]acemq.Ack, len(batch))
		if bad != nil {
			for i := range acks {
				acks[i] = acemq.Retry(fmt.Errorf("patterns: %w", bad))
			}
			return acks
		}
		b := &bisector[T]{fn: fn, cfg: &cfg, batch: batch, acks: acks}
		b.part(ctx, 0, len(batch), false)
		return acks
	}
}

// bisector is one batch's bisection: acks[i] settles batch[i].
type bisector[T any] struct {
	fn     func(context.Context, []*acemq.Message[T]) error
	cfg    *bisectConfig
	batch  []*acemq.Message[T]
	acks   []acemq.Ack
	logged bool // a message that panicked alone was logged
}

// part settles batch[lo:hi] and reports whether one call of fn on the
// whole part succeeded. failed says that the part is known to fail without
// a call: its first sibling succeeded in one call where their parent had
// failed. A part of one message is always called, for its own error.
func (b *bisector[T]) part(ctx context.Context, lo, hi int, failed bool) (passed bool) {
	if hi <= lo {
		return true
	}
	if !failed || hi-lo == 1 {
		if err := ctx.Err(); err != nil {
			b.settle(lo, hi, acemq.Retry(fmt.Errorf("patterns: Bisect stopped before this part of the batch was tried: %w", err)))
			return false
		}
		p, stack, err := b.call(ctx, lo, hi)
		switch {
		case err == nil && p == nil:
			b.settle(lo, hi, acemq.Done())
			return true
		case p != nil && hi-lo == 1:
			b.panickedAlone(ctx, lo, p, stack)
			return false
		case p != nil:
			// Split, as for an error.
		case ctx.Err() != nil:
			b.settle(lo, hi, acemq.Retry(err))
			return false
		case hi-lo == 1:
			b.acks[lo] = acemq.AckOf(err)
			return false
		case !b.cfg.splitIf(err):
			b.settle(lo, hi, acemq.AckOf(err))
			return false
		}
	}
	mid := lo + (hi-lo+1)/2
	first := b.part(ctx, lo, mid, false)
	b.part(ctx, mid, hi, first)
	return false
}

// panickedAlone rejects batch[i], on which fn panicked alone, and logs the
// first such message of the batch with the stack.
func (b *bisector[T]) panickedAlone(ctx context.Context, i int, p any, stack string) {
	b.acks[i] = acemq.Reject(fmt.Errorf("patterns: the batch function panicked on this message alone: %v", p))
	if b.logged {
		return
	}
	b.logged = true
	id := ""
	if env := b.batch[i].Envelope; env != nil {
		id = env.ID
	}
	b.cfg.logger.ErrorContext(ctx, "patterns: the batch function panicked on one message alone; it is rejected",
		"queue", b.batch[i].Queue, "id", id, "panic", fmt.Sprint(p), "stack", stack)
}

// call runs fn on batch[lo:hi], turning a panic into its value and stack.
func (b *bisector[T]) call(ctx context.Context, lo, hi int) (panicked any, stack string, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked, stack = p, string(debug.Stack())
		}
	}()
	return nil, "", b.fn(ctx, b.batch[lo:hi:hi])
}

// settle gives every message of batch[lo:hi] ack.
func (b *bisector[T]) settle(lo, hi int, ack acemq.Ack) {
	for i := lo; i < hi; i++ {
		b.acks[i] = ack
	}
}

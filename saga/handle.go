package saga

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
)

// MaxReruns is how many times a step runs again, on the fresh state, after
// a version conflict (another step of the same instance saved first)
// before the message is retried through the consumer's retry policy.
const MaxReruns = 5

// Instance is one saga instance as a step sees it.
type Instance[S any] struct {
	// ID is the correlation ID.
	ID string
	// State is the instance's state: the zero S for a new instance, else
	// what the last committed step left. The step changes it; it is saved
	// when the step returns nil.
	State S
	// Tx is the step's transaction: write the service's own rows with it,
	// and send messages with outbox.Publisher.Send(ctx, in.Tx, ...), so
	// that they commit with the state or not at all. Never commit or roll
	// it back; the saga does. On SQLite with one connection, a step that
	// uses the *sql.DB instead of Tx waits forever.
	Tx *sql.Tx

	isNew, complete bool
}

// New reports whether this message creates the instance: there was none
// and the handler was given Starts.
func (i *Instance[S]) New() bool { return i.isNew }

// Complete ends the saga once the step commits: the instance is done, and
// later messages for it are acked without running a step. The row stays,
// for Get and the operators' tools.
func (i *Instance[S]) Complete() { i.complete = true }

// Step is the work of one message on one instance. It returns nil to
// commit, or an error to roll everything back; the error becomes the
// message's Ack through acemq.AckOf (retried, or dead-lettered at once
// when marked with acemq.Fatal).
type Step[S, T any] func(ctx context.Context, in *Instance[S], m *acemq.Message[T]) error

// Handle returns the acemq handler that runs step for each message of type
// T on the instance of s that correlate names, in one transaction: the
// inbox claim of the message's ID, the load of the instance, the step, the
// save of the state with an optimistic version check (or the insert of a
// new instance), then the commit. Then the message is acked.
//
//   - A message whose ID was handled before (within InboxKeep) is acked
//     and changes nothing.
//   - A step error rolls everything back: acemq.AckOf(err).
//   - A version conflict (another step saved the instance first, or created
//     it first) rolls back and runs the step again on the fresh state, up to
//     MaxReruns times; then the message is retried.
//   - A message for a completed instance is acked without running the step.
//   - A message for no instance is rejected, unless the handler was given
//     Starts: `no saga "checkout" with correlation ID "o-42"`. A message
//     for which correlate returns "" is rejected too.
//   - A stored state that does not decode into S is parked (acemq.Park),
//     with the reason; fix S and replay the parked message.
//   - A database error is retried.
//   - A step (or correlate) that panics is recovered by the handler: the
//     stack is logged once, at Error, on the saga's logger (WithLogger)
//     with the message's ID and the correlation ID, and the message is
//     rejected to the dead-letter queue at once, as the engine settles a
//     handler's panic, with the reason `the handler rejected it: saga
//     "checkout": the step panicked on correlation ID "o-42": <value>`.
//     Being an Ack, it is not logged again by the engine, and the kill
//     switch counts it as a rejection, not as a failure.
//
// Until a check passes, the handler first checks, as Check does, that the
// saga's table and its inbox's table exist, before it opens a transaction
// or claims anything. While one is missing every message is retried down
// the consumer's ladder with the reason `saga: table acemq_saga_checkout of
// saga "checkout" does not exist; call Saga.Migrate first`, and the first
// such message logs it at Error; a migration that lands within the ladder
// loses nothing. Call Check where the service starts to fail before any
// message is taken.
//
// A nil s, correlate, step or option makes every message retried with an
// error saying which.
func Handle[S, T any](s *Saga[S], correlate func(*acemq.Message[T]) string, step Step[S, T], opts ...HandleOption) acemq.Handler[T] {
	var (
		cfg     handleConfig
		nilOpts bool
	)
	for _, o := range opts {
		if o == nil {
			nilOpts = true
			continue
		}
		o.applyHandle(&cfg)
	}
	var bad error
	switch {
	case s == nil:
		bad = errors.New("saga: Handle was given a nil *Saga")
	case correlate == nil:
		bad = fmt.Errorf("saga: Handle of %q was given a nil correlate function", s.name)
	case step == nil:
		bad = fmt.Errorf("saga: Handle of %q was given a nil Step", s.name)
	case nilOpts:
		bad = fmt.Errorf("saga: Handle of %q was given a nil HandleOption", s.name)
	}
	return func(ctx context.Context, m *acemq.Message[T]) (ack acemq.Ack) {
		if bad != nil {
			return acemq.Retry(bad)
		}
		if m == nil || m.Envelope == nil || m.Envelope.ID == "" {
			return acemq.Reject(fmt.Errorf("saga %q: the message has no envelope or no ID", s.name))
		}
		if !s.checked.Load() {
			if err := s.Check(ctx); err != nil {
				s.logMissing(ctx, err)
				return acemq.Retry(err)
			}
		}
		var id string
		defer func() {
			if p := recover(); p != nil {
				ack = panicked(ctx, s, m, id, p)
			}
		}()
		id = correlate(m)
		if id == "" {
			return acemq.Reject(fmt.Errorf("saga %q: message %q has no correlation ID", s.name, m.Envelope.ID))
		}
		key := "saga:" + s.name + ":" + m.Envelope.ID
		for run := 0; ; run++ {
			r, err := attempt(ctx, s, cfg, id, key, step, m)
			switch r {
			case committed:
				s.metrics.step(ctx, OutcomeCommitted)
				return acemq.Done()
			case duplicate:
				s.metrics.step(ctx, OutcomeDuplicate)
				return acemq.Done()
			case completed:
				return acemq.Done()
			case missing:
				return acemq.Reject(err)
			case undecodable:
				return acemq.Park(err)
			case conflict:
				s.metrics.step(ctx, OutcomeConflictRetried)
				if run < MaxReruns {
					continue
				}
				return acemq.Retry(fmt.Errorf("saga %q with correlation ID %q: another step saved the instance first, %d times in a row", s.name, id, run+1))
			case busy:
				return acemq.Retry(err)
			case stale:
				s.metrics.step(ctx, OutcomeStale)
				return acemq.Retry(err)
			}
			s.metrics.step(ctx, OutcomeFailed)
			return acemq.AckOf(err)
		}
	}
}

// logMissing logs, once per saga, at Error, a Check that found a table
// missing: the consumer's settlements say it too, but a retry's reason is
// easy to miss until the messages reach the dead-letter queue.
func (s *Saga[S]) logMissing(ctx context.Context, err error) {
	if errors.Is(err, ErrNotMigrated) && s.missingLogged.CompareAndSwap(false, true) {
		s.logger.ErrorContext(ctx, "saga: a table is missing, so every message is retried until it exists",
			"saga", s.name, "error", err)
	}
}

// panicked logs a panic of the step (or of correlate) once, at Error, with
// its stack, and settles the message as the engine settles a handler's
// panic: rejected, to the dead-letter queue at once. The saga recovers it
// itself so that the log can name the correlation ID, and so that the
// engine, which sees an Ack, does not log it again.
func panicked[S, T any](ctx context.Context, s *Saga[S], m *acemq.Message[T], id string, p any) acemq.Ack {
	s.metrics.step(ctx, OutcomeFailed)
	s.logger.ErrorContext(ctx, "saga: a step panicked; the message is rejected",
		"saga", s.name, "queue", m.Queue, "id", m.Envelope.ID, "correlation_id", id,
		"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	if id == "" {
		return acemq.Reject(fmt.Errorf("saga %q: the correlate function panicked on message %q: %v", s.name, m.Envelope.ID, p))
	}
	return acemq.Reject(fmt.Errorf("saga %q: the step panicked on correlation ID %q: %v", s.name, id, p))
}

// result is how one run of a step ended.
type result int

const (
	failed      result = iota // the step or the database failed: err
	committed                 // the step committed
	duplicate                 // the message was handled before
	completed                 // the instance is done; nothing ran
	missing                   // no instance, and the handler may not start one: err
	undecodable               // the stored state does not decode: err
	conflict                  // another step saved first; run again
	stale                     // the message's fence is below the instance's: err
	busy                      // another claim of the message holds it: err
)

// staleStep is the error of a step refused for its message's fence: the
// Retry it is returned in wraps acemq.ErrPartitionLost, so that an ordered
// consumer gives the delivery back for the partition's current holder.
func (s *Saga[S]) staleStep(id string, mine, fence int64) error {
	return fmt.Errorf("saga %q with correlation ID %q: the step's fence %d is below the %d that saved the instance (another instance holds the partition): %w",
		s.name, id, mine, fence, acemq.ErrPartitionLost)
}

// attempt runs step once, in a transaction of its own, and commits it when
// everything went through.
func attempt[S, T any](ctx context.Context, s *Saga[S], cfg handleConfig, id, key string, step Step[S, T], m *acemq.Message[T]) (res result, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return failed, fmt.Errorf("saga %q: beginning a transaction: %w", s.name, err)
	}
	done := false
	defer func() { // also when the step panics
		if !done {
			_ = tx.Rollback()
		}
	}()
	claim, err := s.inbox.ClaimTx(ctx, tx, key, s.keep)
	switch {
	case err != nil:
		return failed, err
	case claim == patterns.Duplicate:
		return duplicate, nil
	case claim == patterns.InProgress:
		return busy, fmt.Errorf("saga %q: the inbox key %q is held by a claim in progress", s.name, key)
	}

	in := &Instance[S]{ID: id, Tx: tx}
	var (
		state   []byte
		version int64
		isDone  bool
		fence   int64
	)
	mine := int64(m.Fence())
	err = tx.QueryRowContext(ctx, s.load, id).Scan(&state, &version, &isDone, &fence)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if !cfg.starts {
			return missing, &notFound{s.name, id}
		}
		in.isNew = true
	case err != nil:
		return failed, fmt.Errorf("saga %q: loading correlation ID %q: %w", s.name, id, err)
	case mine > 0 && fence > mine:
		return stale, s.staleStep(id, mine, fence)
	case isDone:
		return completed, nil
	default:
		if err := s.decodeState(ctx, id, state, &in.State); err != nil {
			return undecodable, s.undecodable(id, err)
		}
	}

	if err := step(ctx, in, m); err != nil {
		return failed, err
	}
	next, err := s.encodeState(ctx, m.Envelope, id, in.State)
	if err != nil {
		return failed, fmt.Errorf("saga %q: encoding the state of correlation ID %q: %w", s.name, id, err)
	}
	now := s.timeArg(time.Now())
	var saved sql.Result
	if in.isNew {
		saved, err = tx.ExecContext(ctx, s.insert, id, string(next), in.complete, now, now, mine)
	} else if mine > 0 {
		saved, err = tx.ExecContext(ctx, s.updateFenced, string(next), in.complete, now, mine, id, version, mine)
	} else {
		saved, err = tx.ExecContext(ctx, s.update, string(next), in.complete, now, id, version)
	}
	if err != nil {
		return failed, fmt.Errorf("saga %q: saving correlation ID %q: %w", s.name, id, err)
	}
	n, err := saved.RowsAffected()
	if err != nil {
		return failed, fmt.Errorf("saga %q: saving correlation ID %q: %w", s.name, id, err)
	}
	if n == 0 {
		return conflict, nil
	}
	done = true
	if err := tx.Commit(); err != nil {
		return failed, fmt.Errorf("saga %q: committing the step on correlation ID %q: %w", s.name, id, err)
	}
	return committed, nil
}

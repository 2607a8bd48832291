package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq"
)

// settleTimeout bounds the claim and the statements that record a batch's
// fate, which run on a context a stopping Run does not cancel: a claim cut
// short would strand the rows it leased, and a settle cut short would have
// confirmed rows sent again.
const settleTimeout = 10 * time.Second

// settleTries is how many times a settle statement runs before its rows are
// left to their lease; settleRetryDelay the pause after the first failure,
// doubling.
const (
	settleTries      = 5
	settleRetryDelay = 50 * time.Millisecond
)

// deleteChunk bounds the placeholders of one DELETE.
const deleteChunk = 1000

// maxErrorText bounds what last_error keeps of an error.
const maxErrorText = 1000

// relaySQL holds a Relay's statements, built once.
type relaySQL struct {
	claim, fail, release, delete string
}

func newRelaySQL(o *Outbox) relaySQL {
	d, t := o.dialect, o.table
	now := d.now()
	// Take the earliest due rows that no live lease holds and that are not
	// dead, walking the claim index (due_at, id), and lease them: one
	// statement, so two relays never claim a row twice (on PostgreSQL SKIP
	// LOCKED lets them take different rows). Due and lease times are the
	// database's, so relays on machines whose clocks disagree agree on
	// both. The lease's end comes back with each row: it is the claim's
	// token, which the settle statements check before they touch a row.
	pick := fmt.Sprintf(`SELECT id FROM %[1]s WHERE dead_at IS NULL AND due_at <= %[2]s
	AND (locked_until IS NULL OR locked_until <= %[2]s)
	ORDER BY due_at, id LIMIT ?`, t, now)
	var claim string
	if d == Postgres {
		// = ANY(ARRAY(...)) looks the picked ids up by primary key; IN
		// (...) makes the planner hash-join them against the whole table.
		claim = fmt.Sprintf(`UPDATE %s SET locked_until = %s WHERE id = ANY(ARRAY(%s FOR UPDATE SKIP LOCKED))`,
			t, d.later(now), pick)
	} else {
		claim = fmt.Sprintf(`UPDATE %s SET locked_until = %s WHERE id IN (%s)`, t, d.later(now), pick)
	}
	claim += "\nRETURNING id, message_id, exchange, routing_key, headers, body, content_type, due_at, attempts, locked_until"
	return relaySQL{
		claim: d.sql(claim),
		// A failed row goes back by its backoff, or dies at its last
		// attempt. The lease check makes the statement safe to retry and
		// leaves a row another relay has claimed since alone.
		fail: d.sql(fmt.Sprintf(`UPDATE %s SET attempts = attempts + 1, last_error = ?, due_at = %s, locked_until = NULL,
	dead_at = CASE WHEN attempts + 1 >= ? THEN %s ELSE NULL END
	WHERE id = ? AND locked_until = ?`, t, d.later(now), now)),
		release: fmt.Sprintf(`UPDATE %s SET locked_until = NULL WHERE locked_until = %s AND id IN `, t, d.ph(1)),
		delete:  fmt.Sprintf(`DELETE FROM %s WHERE id IN `, t),
	}
}

// errNotSent marks a row the batch never got to publish (its time ran out
// first, or Run stopped): it is handed back unchanged, not counted as a
// failure.
var errNotSent = errors.New("outbox: not sent")

// errStopped is the cause with which a stopping Run abandons the publishes
// still awaiting their confirm once StopTimeout has passed.
var errStopped = errors.New("outbox: the relay stopped")

func notSent(cause error) error { return fmt.Errorf("%w: %w", errNotSent, cause) }

// row is one claimed outbox row.
type row struct {
	id                              int64
	messageID, exchange, key, ctype string
	headers, body                   []byte
	due, lease                      time.Time
	attempts                        int
}

// claim leases up to a batch of due rows, sorted by id. It runs to the end
// even when ctx is cancelled, bounded by settleTimeout, so that a stopping
// relay knows what it leased and can hand it back.
func (r *Relay) claim(ctx context.Context) ([]row, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	rs, err := r.o.db.QueryContext(ctx, r.sqls.claim, r.cfg.lease.Microseconds(), r.cfg.batch)
	if err != nil {
		return nil, fmt.Errorf("outbox: claiming rows of %s: %w", r.o.table, err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var (
			w          row
			due, lease dbTime
		)
		if err := rs.Scan(&w.id, &w.messageID, &w.exchange, &w.key, &w.headers, &w.body, &w.ctype, &due, &w.attempts, &lease); err != nil {
			return nil, fmt.Errorf("outbox: reading claimed rows of %s: %w", r.o.table, err)
		}
		w.due, w.lease = due.t, lease.t
		out = append(out, w)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: reading claimed rows of %s: %w", r.o.table, err)
	}
	slices.SortFunc(out, func(a, b row) int { return cmp.Compare(a.id, b.id) })
	return out, nil
}

// relayBatch claims a batch, publishes it with at most Window confirms
// outstanding, and records each row's fate. It returns how many rows it
// claimed.
//
// When ctx ends, no further publish starts; those awaiting their confirm
// get StopTimeout to finish, so that what was sent is deleted rather than
// handed back and sent again. Then the batch is settled on a context of its
// own.
func (r *Relay) relayBatch(ctx context.Context) (int, error) {
	// The lease runs from the claim statement, so the publishes' half of it
	// is counted from before the claim, however long the claim takes.
	start := time.Now()
	rows, err := r.claim(ctx)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	// Publishes give up at half the lease, so no other relay can claim a
	// row while this one may still send it.
	pubCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), start.Add(r.cfg.lease/2))
	defer cancel()
	pubCtx, abandon := context.WithCancelCause(pubCtx)
	defer abandon(nil)
	errs := make([]error, len(rows))
	confirmed := make([]time.Time, len(rows))
	b := &batch{ctx: ctx, pubCtx: pubCtx, abandon: abandon, rows: rows, errs: errs, confirmed: confirmed}
	// First tries go out together, Window at a time, in the order they
	// were written: rows of one ordering key reach the broker in row order.
	// Rows that failed before go after them and, when there are few, one at
	// a time: a poison row, one whose publish makes the broker close the
	// channel (a missing exchange), then takes no innocent publish in
	// flight with it.
	var first, retries []int
	for i, w := range rows {
		if w.attempts == 0 {
			first = append(first, i)
		} else {
			retries = append(retries, i)
		}
	}
	window := r.cfg.window
	if len(retries) <= isolatedRetries {
		window = 1
	}
	r.dispatch(b, first, r.cfg.window)
	r.dispatch(b, retries, window)
	return len(rows), r.settle(ctx, rows, errs, confirmed, context.Cause(pubCtx) == errStopped)
}

// batch is what dispatch needs of a batch in hand.
type batch struct {
	ctx, pubCtx context.Context // Run's; the publishes'
	abandon     context.CancelCauseFunc
	rows        []row
	errs        []error     // each row's fate
	confirmed   []time.Time // when each row's publish returned
}

// isolatedRetries is the most rows that failed before a batch publishes
// one at a time; more than that is the tail of an outage, not a poison
// row, and goes out Window at a time.
const isolatedRetries = 8

// dispatch publishes the rows of b at the indices given, in that order,
// window at a time through PublishRawAll (one call in flight, so rows of
// one key are never reordered), until Run's ctx or the publishes' ends;
// the rows it did not start are marked not sent. Once Run's ctx has ended
// the call in flight gets StopTimeout (see drain).
func (r *Relay) dispatch(b *batch, indices []int, window int) {
	for len(indices) > 0 {
		if err := stopped(b.ctx, b.pubCtx); err != nil {
			for _, i := range indices {
				b.errs[i] = notSent(err)
			}
			return
		}
		n := min(window, len(indices))
		chunk := indices[:n]
		indices = indices[n:]
		msgs := make([]acemq.RawMessage, 0, len(chunk))
		sent := make([]int, 0, len(chunk))
		for _, i := range chunk {
			m, err := r.message(&b.rows[i])
			if err != nil {
				b.errs[i] = err
				continue
			}
			msgs = append(msgs, m)
			sent = append(sent, i)
		}
		done := make(chan struct{})
		go func() { // ends when the publishes do, which pubCtx bounds
			defer close(done)
			errs := r.c.PublishRawAll(b.pubCtx, msgs)
			now := time.Now()
			for j, i := range sent {
				b.errs[i], b.confirmed[i] = errs[j], now
			}
		}()
		r.drain(b.ctx, done, b.abandon)
	}
}

// stopped returns why no further publish of the batch may start, or nil.
func stopped(ctx, pubCtx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return pubCtx.Err()
}

// drain waits for done, the end of the batch's publishes in flight. Once
// ctx has ended it waits at most StopTimeout, then abandons the rest
// (their publishes end with errStopped as the cause) and waits for them to
// return.
func (r *Relay) drain(ctx context.Context, done <-chan struct{}, abandon context.CancelCauseFunc) {
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	grace := time.NewTimer(r.cfg.stopTimeout)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		abandon(errStopped)
		<-done
	}
}

// message is one row as it was stored, ready for PublishRawAll.
func (r *Relay) message(w *row) (acemq.RawMessage, error) {
	env, err := unmarshalEnvelope(w.headers)
	if err != nil {
		return acemq.RawMessage{}, fmt.Errorf("outbox: row %d of %s has an unreadable envelope: %w", w.id, r.o.table, err)
	}
	return acemq.RawMessage{
		Exchange: w.exchange, RoutingKey: w.key, Envelope: env, Body: w.body, ContentType: w.ctype,
	}, nil
}

// settle deletes the confirmed rows, hands back the ones a stopping Run or
// a closed Conn never sent (and, when abandoned is set, those whose confirm
// a stopping Run stopped waiting for), and pushes each failed one back by
// the backoff, or dead-letters it at its last attempt. It logs one line for
// the batch's failures and returns ErrClosed when the Conn is closed.
//
// Each statement is tried again when it fails (a lost connection, say),
// within settleTimeout. The release and the push-back touch a row only if
// it still holds this batch's lease, so they never undo another relay's
// claim. Rows whose fate is not recorded keep their lease until it lapses
// and are sent again (at least once).
func (r *Relay) settle(ctx context.Context, rows []row, errs []error, confirmed []time.Time, abandoned bool) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var (
		done, back []int64
		closed     error
		problems   []error
		failures   failureLog
	)
	for i, w := range rows {
		err := errs[i]
		switch {
		case err == nil:
			done = append(done, w.id)
		case errors.Is(err, acemq.ErrClosed):
			back, closed = append(back, w.id), err
		case errors.Is(err, errNotSent), abandoned && errors.Is(err, context.Canceled):
			back = append(back, w.id) // never tried, or stopped waiting: handed back as it was
		default:
			dies := w.attempts+1 >= r.cfg.maxAttempts
			delay := r.backoff(w.attempts + 1)
			r.o.metrics.failedOne(sctx)
			err := r.exec(sctx, "push back", r.sqls.fail,
				errorText(err), delay.Microseconds(), r.cfg.maxAttempts, w.id, r.o.dialect.timeArg(w.lease))
			if err != nil {
				problems = append(problems, fmt.Errorf("outbox: pushing back row %d of %s: %w", w.id, r.o.table, err))
			} else if dies {
				r.o.metrics.deadOne(sctx)
			}
			failures.add(w, errs[i], delay, dies && err == nil)
		}
	}
	failures.log(sctx, r, len(rows))
	if err := r.execIDs(sctx, "delete", r.sqls.delete, nil, done); err != nil {
		problems = append(problems, fmt.Errorf("outbox: deleting %d relayed rows of %s (they will be sent again after the lease): %w", len(done), r.o.table, err))
	} else {
		for i, w := range rows {
			if errs[i] == nil {
				r.o.metrics.relayedOne(sctx, w.due, confirmed[i])
			}
		}
	}
	// Rows of one batch share its lease: one token for the release.
	if len(back) > 0 {
		lease := r.o.dialect.timeArg(rows[0].lease)
		if err := r.execIDs(sctx, "release", r.sqls.release, []any{lease}, back); err != nil {
			problems = append(problems, fmt.Errorf("outbox: releasing %d unsent rows of %s (they will be claimed after the lease): %w", len(back), r.o.table, err))
		}
	}
	if closed != nil {
		problems = append(problems, closed)
	}
	return errors.Join(problems...)
}

// failureLog gathers a batch's failed publishes for one log line.
type failureLog struct {
	failed, dead int
	first        error
	firstRow     row
	minRetry     time.Duration
}

func (f *failureLog) add(w row, err error, retry time.Duration, died bool) {
	if f.failed == 0 {
		f.first, f.firstRow, f.minRetry = err, w, retry
	}
	f.failed++
	f.minRetry = min(f.minRetry, retry)
	if died {
		f.dead++
	}
}

// log writes the batch's one line about its failures, if it had any: a
// warning, or an error when a row was dead-lettered.
func (f *failureLog) log(ctx context.Context, r *Relay, batch int) {
	if f.failed == 0 {
		return
	}
	level, msg := slog.LevelWarn, "acemq: outbox: publishes of a batch failed; the rows will be tried again"
	if f.dead > 0 {
		level, msg = slog.LevelError, "acemq: outbox: publishes of a batch failed; rows at their last attempt were dead-lettered"
	}
	r.cfg.logger.LogAttrs(ctx, level, msg,
		slog.String("table", r.o.table), slog.Int("batch", batch), slog.Int("failed", f.failed),
		slog.Int("dead", f.dead), slog.Duration("retry_in", f.minRetry),
		slog.Int64("first_row", f.firstRow.id), slog.String("first_message_id", f.firstRow.messageID),
		slog.Int("first_attempts", f.firstRow.attempts+1), slog.Any("error", f.first))
}

// exec runs one settle statement, trying again after a failure (a lost
// connection, a backend killed by an administrator) until it succeeds,
// settleTries have failed or ctx ends. Every settle statement may run
// twice: the DELETE and the release are idempotent, the push-back checks
// the lease it clears.
func (r *Relay) exec(ctx context.Context, what, query string, args ...any) error {
	delay := settleRetryDelay
	var err error
	for try := range settleTries {
		if r.hook != nil {
			r.hook(what)
		}
		if _, err = r.o.db.ExecContext(ctx, query, args...); err == nil {
			return nil
		}
		if try == settleTries-1 || ctx.Err() != nil {
			break
		}
		pause := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			pause.Stop()
			return errors.Join(err, ctx.Err())
		case <-pause.C:
		}
		delay *= 2
	}
	return err
}

// execIDs runs prefix followed by "(id, ...)" for ids, in chunks, with
// args before the ids.
func (r *Relay) execIDs(ctx context.Context, what, prefix string, args []any, ids []int64) error {
	for chunk := range slices.Chunk(ids, deleteChunk) {
		all := make([]any, 0, len(args)+len(chunk))
		all = append(all, args...)
		for _, id := range chunk {
			all = append(all, id)
		}
		q := prefix + "(" + r.o.dialect.phs(len(args)+1, len(chunk)) + ")"
		if err := r.exec(ctx, what, q, all...); err != nil {
			return err
		}
	}
	return nil
}

// errorText is the last_error of a failed row: the error's text, bounded.
func errorText(err error) string {
	s := strings.ReplaceAll(strings.ToValidUTF8(err.Error(), "?"), "\x00", "")
	if len(s) > maxErrorText {
		s = strings.ToValidUTF8(s[:maxErrorText], "") + "..."
	}
	return s
}

package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/acemq/acemq"
)

// settleTimeout bounds the statements that record a batch's fate, which
// run even when Run's ctx has ended so confirmed rows are not sent again.
const settleTimeout = 10 * time.Second

// deleteChunk bounds the placeholders of one DELETE.
const deleteChunk = 1000

// maxErrorText bounds what last_error keeps of an error.
const maxErrorText = 1000

// relaySQL holds a Relay's statements, built once.
type relaySQL struct {
	claim, fail, release string
}

func newRelaySQL(o *Outbox) relaySQL {
	d, t := o.dialect, o.table
	lock := ""
	if d == Postgres {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	return relaySQL{
		// Take the first due rows that no live lease holds, in id order,
		// and lease them: one statement, so two relays never claim a row
		// twice (on PostgreSQL SKIP LOCKED lets them take different rows).
		claim: d.sql(fmt.Sprintf(`UPDATE %[1]s SET locked_until = ? WHERE id IN (
	SELECT id FROM %[1]s WHERE due_at <= ? AND (locked_until IS NULL OR locked_until <= ?)
	ORDER BY id LIMIT ?%[2]s)
RETURNING id, message_id, exchange, routing_key, headers, body, content_type, due_at, attempts`, t, lock)),
		fail: d.sql(fmt.Sprintf(`UPDATE %s SET attempts = attempts + 1, last_error = ?, due_at = ?, locked_until = NULL
	WHERE id = ?`, t)),
		release: fmt.Sprintf(`UPDATE %s SET locked_until = NULL WHERE id IN `, t),
	}
}

// errNotSent marks a row the batch never got to publish (its time ran out
// first): it is handed back unchanged, not counted as a failure.
var errNotSent = errors.New("acemq: outbox: not sent")

func notSent(cause error) error { return fmt.Errorf("%w: %w", errNotSent, cause) }

// row is one claimed outbox row.
type row struct {
	id                              int64
	messageID, exchange, key, ctype string
	headers, body                   []byte
	due                             time.Time
	attempts                        int
}

// claim leases up to a batch of due rows, sorted by id.
func (r *Relay) claim(ctx context.Context, now time.Time) ([]row, error) {
	d := r.o.dialect
	rs, err := r.o.db.QueryContext(ctx, r.sqls.claim,
		d.timeArg(now.Add(r.cfg.lease)), d.timeArg(now), d.timeArg(now), r.cfg.batch)
	if err != nil {
		return nil, fmt.Errorf("acemq: outbox: claiming rows of %s: %w", r.o.table, err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var (
			w   row
			due dbTime
		)
		if err := rs.Scan(&w.id, &w.messageID, &w.exchange, &w.key, &w.headers, &w.body, &w.ctype, &due, &w.attempts); err != nil {
			return nil, fmt.Errorf("acemq: outbox: reading claimed rows of %s: %w", r.o.table, err)
		}
		w.due = due.t
		out = append(out, w)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("acemq: outbox: reading claimed rows of %s: %w", r.o.table, err)
	}
	slices.SortFunc(out, func(a, b row) int { return int(min(max(a.id-b.id, -1), 1)) })
	return out, nil
}

// relayBatch claims a batch, publishes it with at most Window confirms
// outstanding, and records each row's fate. It returns how many rows it
// claimed.
func (r *Relay) relayBatch(ctx context.Context) (int, error) {
	now := time.Now()
	rows, err := r.claim(ctx, now)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	// Publishes give up at half the lease, so no other relay can claim a
	// row while this one may still send it.
	pubCtx, cancel := context.WithDeadline(ctx, now.Add(r.cfg.lease/2))
	defer cancel()
	errs := make([]error, len(rows))
	confirmed := make([]time.Time, len(rows))
	sem := make(chan struct{}, r.cfg.window)
	var wg sync.WaitGroup
	for i := range rows {
		select {
		case sem <- struct{}{}:
		case <-pubCtx.Done():
			errs[i] = notSent(pubCtx.Err())
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = r.publish(pubCtx, &rows[i])
			confirmed[i] = time.Now()
		})
	}
	wg.Wait()
	return len(rows), r.settle(ctx, rows, errs, confirmed, now.Add(r.cfg.lease))
}

// publish sends one row as it was stored.
func (r *Relay) publish(ctx context.Context, w *row) error {
	if err := ctx.Err(); err != nil {
		return notSent(err)
	}
	env, err := unmarshalEnvelope(w.headers)
	if err != nil {
		return fmt.Errorf("acemq: outbox: row %d of %s has an unreadable envelope: %w", w.id, r.o.table, err)
	}
	return r.c.PublishRaw(ctx, acemq.RawMessage{
		Exchange: w.exchange, RoutingKey: w.key, Envelope: env, Body: w.body, ContentType: w.ctype,
	})
}

// settle deletes the confirmed rows, hands back the ones a stopping Run or
// a closed Conn never sent, and pushes each failed one back by the
// backoff. It returns ErrClosed when the Conn is closed.
//
// The statements end when the lease does, at the latest: past it another
// relay may have claimed the rows, and releasing or pushing them back then
// would undo its claim. Rows whose fate is not recorded by then keep their
// lease until it lapses and are sent again (at least once).
func (r *Relay) settle(ctx context.Context, rows []row, errs []error, confirmed []time.Time, leaseEnd time.Time) error {
	deadline := time.Now().Add(settleTimeout)
	if leaseEnd.Before(deadline) {
		deadline = leaseEnd
	}
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	var (
		done, back []int64
		closed     error
		problems   []error
	)
	now := time.Now()
	for i, w := range rows {
		err := errs[i]
		switch {
		case err == nil:
			done = append(done, w.id)
		case errors.Is(err, acemq.ErrClosed):
			back, closed = append(back, w.id), err
		case errors.Is(err, errNotSent), ctx.Err() != nil && errors.Is(err, ctx.Err()):
			back = append(back, w.id) // never tried: handed back as it was
		default:
			r.o.metrics.failedOne(sctx)
			delay := r.backoff(w.attempts + 1)
			r.cfg.logger.WarnContext(sctx, "acemq: outbox: publishing a row failed; it will be tried again",
				slog.String("table", r.o.table), slog.Int64("row", w.id), slog.String("message_id", w.messageID),
				slog.Int("attempts", w.attempts+1), slog.Duration("retry_in", delay), slog.Any("error", err))
			d := r.o.dialect
			if _, e := r.o.db.ExecContext(sctx, r.sqls.fail, errorText(err), d.timeArg(now.Add(delay)), w.id); e != nil {
				problems = append(problems, fmt.Errorf("acemq: outbox: pushing back row %d of %s: %w", w.id, r.o.table, e))
			}
		}
	}
	if err := r.execIDs(sctx, "DELETE FROM "+r.o.table+" WHERE id IN ", done); err != nil {
		problems = append(problems, fmt.Errorf("acemq: outbox: deleting %d relayed rows of %s (they will be sent again after the lease): %w", len(done), r.o.table, err))
	} else {
		for i, w := range rows {
			if errs[i] == nil {
				r.o.metrics.relayedOne(sctx, w.due, confirmed[i])
			}
		}
	}
	if err := r.execIDs(sctx, r.sqls.release, back); err != nil {
		problems = append(problems, fmt.Errorf("acemq: outbox: releasing %d unsent rows of %s (they will be claimed after the lease): %w", len(back), r.o.table, err))
	}
	if closed != nil {
		problems = append(problems, closed)
	}
	return errors.Join(problems...)
}

// execIDs runs prefix followed by "(id, ...)" for ids, in chunks.
func (r *Relay) execIDs(ctx context.Context, prefix string, ids []int64) error {
	for chunk := range slices.Chunk(ids, deleteChunk) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		if _, err := r.o.db.ExecContext(ctx, prefix+"("+r.o.dialect.phs(1, len(chunk))+")", args...); err != nil {
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

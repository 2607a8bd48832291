package outbox

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// DeadRow is a dead-lettered outbox row: one whose publish failed
// MaxAttempts times. It stays in the table, out of every relay's way, until
// Replay puts it back or it is deleted.
type DeadRow struct {
	// ID is the row's primary key, which Replay takes.
	ID int64
	// MessageID is the ID the message carries on the wire.
	MessageID string
	// Exchange and RoutingKey are where the message was going.
	Exchange, RoutingKey string
	// Attempts is how many publishes failed.
	Attempts int
	// LastError is why the last one failed.
	LastError string
	// Created is when the row was written; Died when it was dead-lettered.
	Created, Died time.Time
}

// Dead returns the number of dead-lettered rows in the outbox.
func (o *Outbox) Dead(ctx context.Context) (int64, error) {
	var n int64
	if err := o.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+o.table+" WHERE dead_at IS NOT NULL").Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: counting the dead rows of %s: %w", o.table, err)
	}
	return n, nil
}

// DeadRows returns up to limit dead-lettered rows, oldest death first.
// limit must be positive.
func (o *Outbox) DeadRows(ctx context.Context, limit int) ([]DeadRow, error) {
	if limit < 1 {
		return nil, fmt.Errorf("outbox: DeadRows was given limit %d; want at least 1", limit)
	}
	q := o.dialect.sql(fmt.Sprintf(`SELECT id, message_id, exchange, routing_key, attempts, COALESCE(last_error, ''), created_at, dead_at
	FROM %s WHERE dead_at IS NOT NULL ORDER BY dead_at, id LIMIT ?`, o.table))
	rs, err := o.db.QueryContext(ctx, q, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: listing the dead rows of %s: %w", o.table, err)
	}
	defer rs.Close()
	var out []DeadRow
	for rs.Next() {
		var (
			d             DeadRow
			created, died dbTime
		)
		if err := rs.Scan(&d.ID, &d.MessageID, &d.Exchange, &d.RoutingKey, &d.Attempts, &d.LastError, &created, &died); err != nil {
			return nil, fmt.Errorf("outbox: reading the dead rows of %s: %w", o.table, err)
		}
		d.Created, d.Died = created.t, died.t
		out = append(out, d)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: reading the dead rows of %s: %w", o.table, err)
	}
	return out, nil
}

// Replay brings the dead-lettered rows with the given ids back to life:
// due at once (by the database's clock), with no attempts counted and
// last_error kept for the record. An id that is not a dead row is left
// alone. Replay returns how many rows it revived.
func (o *Outbox) Replay(ctx context.Context, ids ...int64) (int64, error) {
	var total int64
	for chunk := range slices.Chunk(ids, deleteChunk) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		n, err := o.revive(ctx, " AND id IN ("+o.dialect.phs(1, len(chunk))+")", args)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// ReplayAll brings every dead-lettered row back to life, as Replay does,
// and returns how many there were.
func (o *Outbox) ReplayAll(ctx context.Context) (int64, error) {
	return o.revive(ctx, "", nil)
}

func (o *Outbox) revive(ctx context.Context, where string, args []any) (int64, error) {
	q := fmt.Sprintf(`UPDATE %s SET dead_at = NULL, attempts = 0, locked_until = NULL, due_at = %s
	WHERE dead_at IS NOT NULL%s`, o.table, o.dialect.now(), where)
	res, err := o.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("outbox: replaying dead rows of %s: %w", o.table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("outbox: replaying dead rows of %s: %w", o.table, err)
	}
	return n, nil
}

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq/patterns"
)

// Inbox remembers which messages were handled, in the application's own
// database: it is a patterns.IdempotencyStore for patterns.WithIdempotency.
// Because it lives beside the application's tables, a handler can write
// its effects and complete the claim in one transaction with CompleteTx,
// so a crash between the two cannot happen. It is safe for concurrent use.
//
// A row per key holds whether the key is done and until when the row
// counts: the lease while in progress, the keep once done (expires_at NULL,
// which only a hand-written row has, never expires). An expired row is taken over by the next Claim; Purge deletes
// expired rows.
type Inbox struct {
	db      *sql.DB
	dialect Dialect
	table   string

	claim, claimDone, state, complete, release, purge string
}

var _ patterns.IdempotencyStore = (*Inbox)(nil)

// NewInbox returns an Inbox over db in the table acemq_inbox, or the one
// Table names. Call Migrate once to create the table.
func NewInbox(db *sql.DB, dialect Dialect, opts ...Option) (*Inbox, error) {
	switch {
	case db == nil:
		return nil, errors.New("outbox: NewInbox was given a nil *sql.DB")
	case !dialect.valid():
		return nil, fmt.Errorf("outbox: NewInbox was given %v; want outbox.Postgres or outbox.SQLite", dialect)
	}
	cfg, err := newConfig(DefaultInboxTable, opts)
	if err != nil {
		return nil, err
	}
	t, d := cfg.table, dialect
	return &Inbox{
		db: db, dialect: d, table: t,
		claim: d.sql(fmt.Sprintf(`INSERT INTO %[1]s (claim_key, done, expires_at) VALUES (?, FALSE, ?)
	ON CONFLICT (claim_key) DO UPDATE SET done = FALSE, expires_at = excluded.expires_at
	WHERE %[1]s.expires_at IS NOT NULL AND %[1]s.expires_at <= ?
	RETURNING claim_key`, t)),
		claimDone: d.sql(fmt.Sprintf(`INSERT INTO %[1]s (claim_key, done, expires_at) VALUES (?, TRUE, ?)
	ON CONFLICT (claim_key) DO UPDATE SET done = TRUE, expires_at = excluded.expires_at
	WHERE %[1]s.expires_at IS NOT NULL AND %[1]s.expires_at <= ?
	RETURNING claim_key`, t)),
		state: d.sql(fmt.Sprintf(`SELECT done FROM %s WHERE claim_key = ?`, t)),
		complete: d.sql(fmt.Sprintf(`INSERT INTO %s (claim_key, done, expires_at) VALUES (?, TRUE, ?)
	ON CONFLICT (claim_key) DO UPDATE SET done = TRUE, expires_at = excluded.expires_at`, t)),
		release: d.sql(fmt.Sprintf(`DELETE FROM %s WHERE claim_key = ? AND done = FALSE`, t)),
		purge:   d.sql(fmt.Sprintf(`DELETE FROM %s WHERE expires_at IS NOT NULL AND expires_at <= ?`, t)),
	}, nil
}

// TableName returns the name of the Inbox's table.
func (in *Inbox) TableName() string { return in.table }

// Migrate creates the inbox table, if it does not exist: claim_key (the
// primary key), done, and expires_at (NULL for never), with an index on
// expires_at for Purge.
func (in *Inbox) Migrate(ctx context.Context) error {
	boolean := "BOOLEAN"
	_, ts, _, _ := in.dialect.types()
	if in.dialect == SQLite {
		boolean = "INTEGER"
	}
	stmts := []string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	claim_key TEXT PRIMARY KEY,
	done %s NOT NULL,
	expires_at %s
)`, in.table, boolean, ts),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s_expires_at_idx ON %s (expires_at)`, in.table, in.table),
	}
	for _, stmt := range stmts {
		if _, err := in.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("outbox: migrating inbox table %s: %w", in.table, err)
		}
	}
	return nil
}

// Drop deletes the inbox table. It is meant for tests and tear-downs.
func (in *Inbox) Drop(ctx context.Context) error {
	if _, err := in.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+in.table); err != nil {
		return fmt.Errorf("outbox: dropping inbox table %s: %w", in.table, err)
	}
	return nil
}

// Claim takes key for lease: Claimed when the key is new or its row has
// expired (an abandoned claim or a forgotten completion), Duplicate when it
// was completed and is still kept, InProgress when another claim's lease
// is running. lease must be positive.
func (in *Inbox) Claim(ctx context.Context, key string, lease time.Duration) (patterns.ClaimResult, error) {
	if err := checkKey("Claim", key); err != nil {
		return 0, err
	}
	if lease <= 0 {
		return 0, fmt.Errorf("outbox: inbox Claim of key %q was given lease %v; want a positive one", key, lease)
	}
	for range 3 {
		now := time.Now()
		var got string
		err := in.db.QueryRowContext(ctx, in.claim, key, in.dialect.timeArg(now.Add(lease)), in.dialect.timeArg(now)).Scan(&got)
		switch {
		case err == nil:
			return patterns.Claimed, nil
		case !errors.Is(err, sql.ErrNoRows):
			return 0, fmt.Errorf("outbox: claiming key %q in %s: %w", key, in.table, err)
		}
		var done bool
		err = in.db.QueryRowContext(ctx, in.state, key).Scan(&done)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			continue // released between the two statements: try again
		case err != nil:
			return 0, fmt.Errorf("outbox: reading key %q in %s: %w", key, in.table, err)
		case done:
			return patterns.Duplicate, nil
		default:
			return patterns.InProgress, nil
		}
	}
	return patterns.InProgress, nil
}

// Complete marks key as handled and keeps it for keep: Claims of it report
// Duplicate until then. keep <= 0 forgets it at once, as
// patterns.MemoryStore does; pass a long keep to remember for good.
func (in *Inbox) Complete(ctx context.Context, key string, keep time.Duration) error {
	if err := checkKey("Complete", key); err != nil {
		return err
	}
	if _, err := in.db.ExecContext(ctx, in.complete, key, in.keepUntil(keep)); err != nil {
		return fmt.Errorf("outbox: completing key %q in %s: %w", key, in.table, err)
	}
	return nil
}

// CompleteTx is Complete within tx: the handler writes its effects and the
// completion in one transaction, so either both commit or neither does.
// When the transaction rolls back, the claim's lease still holds the key
// until it expires or is released, and a redelivery then runs the handler
// again.
func (in *Inbox) CompleteTx(ctx context.Context, tx *sql.Tx, key string, keep time.Duration) error {
	if err := checkKey("CompleteTx", key); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("outbox: inbox CompleteTx of key %q was given a nil *sql.Tx", key)
	}
	if _, err := tx.ExecContext(ctx, in.complete, key, in.keepUntil(keep)); err != nil {
		return fmt.Errorf("outbox: completing key %q in %s within a transaction: %w", key, in.table, err)
	}
	return nil
}

// ClaimTx claims key and completes it within tx, kept for keep once tx
// commits: Claimed when the key is new or its row has expired, Duplicate
// when it was completed and is still kept, InProgress when a Claim's lease
// on it is running. It is Claim and CompleteTx in one statement, for a
// handler whose whole work is one transaction: when tx rolls back, the key
// is free again at once, with no lease to wait out. On PostgreSQL a
// ClaimTx of a key another open transaction has claimed waits for that
// transaction to end, so two deliveries of one message never both get
// Claimed. keep <= 0 makes the row expire at once, so the next ClaimTx of
// the key takes it over.
func (in *Inbox) ClaimTx(ctx context.Context, tx *sql.Tx, key string, keep time.Duration) (patterns.ClaimResult, error) {
	if err := checkKey("ClaimTx", key); err != nil {
		return 0, err
	}
	if tx == nil {
		return 0, fmt.Errorf("outbox: inbox ClaimTx of key %q was given a nil *sql.Tx", key)
	}
	var got string
	err := tx.QueryRowContext(ctx, in.claimDone, key, in.keepUntil(keep), in.dialect.timeArg(time.Now())).Scan(&got)
	switch {
	case err == nil:
		return patterns.Claimed, nil
	case !errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("outbox: claiming key %q in %s within a transaction: %w", key, in.table, err)
	}
	// The row exists and has not expired; the transaction sees it, since
	// the insert found it.
	var done bool
	if err := tx.QueryRowContext(ctx, in.state, key).Scan(&done); err != nil {
		return 0, fmt.Errorf("outbox: reading key %q in %s within a transaction: %w", key, in.table, err)
	}
	if done {
		return patterns.Duplicate, nil
	}
	return patterns.InProgress, nil
}

// Release gives up a claim that was not completed, so a redelivery may
// claim the key at once. A completed key stays completed.
func (in *Inbox) Release(ctx context.Context, key string) error {
	if err := checkKey("Release", key); err != nil {
		return err
	}
	if _, err := in.db.ExecContext(ctx, in.release, key); err != nil {
		return fmt.Errorf("outbox: releasing key %q in %s: %w", key, in.table, err)
	}
	return nil
}

// Purge deletes the rows that have expired and returns how many it
// deleted. Run it now and then (a Claim takes over an expired row by
// itself; Purge only keeps the table small).
func (in *Inbox) Purge(ctx context.Context) (int64, error) {
	res, err := in.db.ExecContext(ctx, in.purge, in.dialect.timeArg(time.Now()))
	if err != nil {
		return 0, fmt.Errorf("outbox: purging expired keys of %s: %w", in.table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("outbox: counting purged keys of %s: %w", in.table, err)
	}
	return n, nil
}

// keepUntil is the expires_at of a completion kept for keep.
func (in *Inbox) keepUntil(keep time.Duration) any {
	return in.dialect.timeArg(time.Now().Add(max(keep, 0)))
}

func checkKey(op, key string) error {
	if key == "" {
		return fmt.Errorf("outbox: inbox %s was given an empty key", op)
	}
	return nil
}

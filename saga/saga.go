package saga

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/outbox"
)

// ErrNotFound is what Get returns, wrapped, when no instance has the
// correlation ID; the error a handler rejects a message with, when it may
// not start the saga, wraps it too. Test with errors.Is.
var ErrNotFound = errors.New("saga: no such instance")

// notFound names the saga and the correlation ID that has no instance.
type notFound struct{ name, id string }

func (e *notFound) Error() string {
	return fmt.Sprintf("no saga %q with correlation ID %q", e.name, e.id)
}

func (e *notFound) Is(target error) bool { return target == ErrNotFound }

// ErrNotMigrated is what Check returns, wrapped, when the saga's table or
// its inbox's table does not exist; a handler made by Handle retries its
// messages with an error wrapping it until they do. Test with errors.Is.
var ErrNotMigrated = errors.New("saga: a table is missing; call Saga.Migrate")

// missingTable names the saga and its table that does not exist.
type missingTable struct{ name, what, table string }

func (e *missingTable) Error() string {
	return fmt.Sprintf("%s %s of saga %q does not exist; call Saga.Migrate first", e.what, e.table, e.name)
}

func (e *missingTable) Is(target error) bool { return target == ErrNotMigrated }

// TablePrefix is what a saga's table is named with: acemq_saga_<name>.
const TablePrefix = "acemq_saga_"

// maxName bounds a saga's name, so that its table's and index's names
// stay within PostgreSQL's 63 characters.
const maxName = 40

var validName = regexp.MustCompile(`^[a-z0-9_]+$`)

// Snapshot is one instance of a saga as Get and List read it.
type Snapshot[S any] struct {
	ID      string    // the correlation ID
	State   S         // decoded from the row's JSON
	Version int64     // 1 when created, one more at each committed step
	Done    bool      // Complete was called; later messages are acked unhandled
	Created time.Time // when the first step committed (UTC)
	Updated time.Time // when the last step committed (UTC)
}

// Saga is a process manager whose instances, one per correlation ID, keep
// a state of type S in a table of the outbox's database. Build handlers for
// it with Handle. It is safe for concurrent use.
type Saga[S any] struct {
	name    string
	table   string
	db      *sql.DB
	dialect outbox.Dialect
	inbox   *outbox.Inbox
	keep    time.Duration
	metrics *instruments
	logger  *slog.Logger
	cipher  acemq.BodyCipher // WithStateCipher's, or nil

	// checked is set once Check found the tables; a handler checks until
	// then. missingLogged is set once a handler logged a missing table.
	checked, missingLogged atomic.Bool

	load, insert, update, updateFenced, get, list, listOpen, countOpen string
}

// New returns the saga name, whose instances live in the table
// acemq_saga_<name> of o's database, in o's dialect; the messages a step
// sends through an outbox.Publisher of o commit with the step. name is
// made of a-z, 0-9 and _, at most 40 characters; anything else makes New
// fail. New creates nothing: call Migrate once.
//
// New registers the acemq.saga.open gauge with the meter provider
// (WithMeterProvider, else o's); Close unregisters it.
func New[S any](o *outbox.Outbox, name string, opts ...Option) (*Saga[S], error) {
	if o == nil {
		return nil, errors.New("saga: New was given a nil *outbox.Outbox")
	}
	if !validName.MatchString(name) || len(name) > maxName {
		return nil, fmt.Errorf("saga: the name %q is not made of a-z, 0-9 and _ (1 to %d characters)", name, maxName)
	}
	cfg := config{keep: DefaultInboxKeep}
	for _, opt := range opts {
		if opt == nil {
			cfg.errs = append(cfg.errs, errors.New("a nil Option was given"))
			continue
		}
		opt.apply(&cfg)
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, fmt.Errorf("saga: New of %q: %w", name, err)
	}
	s := &Saga[S]{name: name, table: TablePrefix + name, db: o.DB(), dialect: o.Dialect(), inbox: cfg.inbox, keep: cfg.keep, logger: cfg.logger, cipher: cfg.cipher}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if s.inbox == nil {
		in, err := outbox.NewInbox(s.db, s.dialect)
		if err != nil {
			return nil, fmt.Errorf("saga: New of %q: %w", name, err)
		}
		s.inbox = in
	}
	t, q := s.table, s.rebind
	s.load = q(`SELECT state, version, done, fence FROM ` + t + ` WHERE id = ?`)
	s.insert = q(`INSERT INTO ` + t + ` (id, state, version, done, created_at, updated_at, fence) VALUES (?, ?, 1, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`)
	s.update = q(`UPDATE ` + t + ` SET state = ?, version = version + 1, done = ?, updated_at = ? WHERE id = ? AND version = ?`)
	s.updateFenced = q(`UPDATE ` + t + ` SET state = ?, version = version + 1, done = ?, updated_at = ?, fence = ? WHERE id = ? AND version = ? AND fence <= ?`)
	cols := `SELECT id, state, version, done, created_at, updated_at FROM ` + t
	s.get = q(cols + ` WHERE id = ?`)
	s.list = q(cols + ` ORDER BY updated_at, id LIMIT ?`)
	s.listOpen = q(cols + ` WHERE done = FALSE ORDER BY updated_at, id LIMIT ?`)
	s.countOpen = `SELECT COUNT(*) FROM ` + t + ` WHERE done = FALSE`
	mp := cfg.meterProvider
	if mp == nil {
		mp = o.MeterProvider()
	}
	var err error
	if s.metrics, err = newInstruments(mp, name, s.CountOpen); err != nil {
		return nil, fmt.Errorf("saga: creating the instruments of %q: %w", name, err)
	}
	return s, nil
}

// Name returns the saga's name.
func (s *Saga[S]) Name() string { return s.name }

// TableName returns the name of the saga's table, acemq_saga_<name>.
func (s *Saga[S]) TableName() string { return s.table }

// Close unregisters the saga's acemq.saga.open gauge. It closes nothing
// else; Close is idempotent.
func (s *Saga[S]) Close() error { return s.metrics.close() }

// Migrate creates the saga's table and its index, and the inbox's table,
// if they do not exist. The outbox's table is the outbox's: migrate it
// with outbox.Outbox.Migrate.
//
// The columns: id (the correlation ID, the primary key), state (the JSON
// of S: JSONB on PostgreSQL, TEXT on SQLite), version, done, created_at
// and updated_at (timestamptz on PostgreSQL, Unix microseconds on SQLite),
// and fence, the highest fencing token (acemq.Message.Fence) that saved the
// instance, 0 when none did; Migrate adds it to a table made without it.
// The index acemq_saga_<name>_open_idx holds the open instances by
// updated_at.
func (s *Saga[S]) Migrate(ctx context.Context) error {
	state, boolean, ts := "JSONB", "BOOLEAN", "TIMESTAMPTZ"
	if s.dialect == outbox.SQLite {
		state, boolean, ts = "TEXT", "INTEGER", "INTEGER"
	}
	for _, stmt := range []string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id TEXT PRIMARY KEY,
	state %s NOT NULL,
	version BIGINT NOT NULL,
	done %s NOT NULL,
	created_at %s NOT NULL,
	updated_at %s NOT NULL,
	fence BIGINT NOT NULL DEFAULT 0
)`, s.table, state, boolean, ts, ts),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %[1]s_open_idx ON %[1]s (updated_at) WHERE done = FALSE`, s.table),
	} {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("saga: migrating table %s: %w", s.table, err)
		}
	}
	if err := s.addFence(ctx); err != nil {
		return fmt.Errorf("saga: migrating table %s: %w", s.table, err)
	}
	if err := s.inbox.Migrate(ctx); err != nil {
		return fmt.Errorf("saga: migrating %q: %w", s.name, err)
	}
	return nil
}

// addFence adds the fence column to a table made before it existed.
func (s *Saga[S]) addFence(ctx context.Context) error {
	add := `ALTER TABLE ` + s.table + ` ADD COLUMN fence BIGINT NOT NULL DEFAULT 0`
	if s.dialect != outbox.SQLite {
		_, err := s.db.ExecContext(ctx, `ALTER TABLE `+s.table+` ADD COLUMN IF NOT EXISTS fence BIGINT NOT NULL DEFAULT 0`)
		return err
	}
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = 'fence'`, s.table).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	_, err := s.db.ExecContext(ctx, add)
	return err
}

// Check reports whether the saga's table and its inbox's table exist: one
// catalog query each, which reads no rows. When one is missing the error
// wraps ErrNotMigrated and names the table:
//
//	saga: table acemq_saga_transfer of saga "transfer" does not exist; call Saga.Migrate first
//
// Call it where the service starts, before running the saga's consumer,
// when the tables are made by another job than this process's Migrate: a
// missing table then stops the start-up instead of the first message. A
// handler made by Handle checks by itself until a check passes (see Handle).
func (s *Saga[S]) Check(ctx context.Context) error {
	for _, t := range []struct{ what, table string }{
		{"table", s.table},
		{"inbox table", s.inbox.TableName()},
	} {
		ok, err := s.tableExists(ctx, t.table)
		if err != nil {
			return fmt.Errorf("saga: checking that the %s %s of %q exists: %w", t.what, t.table, s.name, err)
		}
		if !ok {
			return fmt.Errorf("saga: %w", &missingTable{s.name, t.what, t.table})
		}
	}
	s.checked.Store(true)
	return nil
}

// tableExists asks the database's catalog whether table exists: on
// PostgreSQL in the search path, as the saga's unqualified queries find it.
func (s *Saga[S]) tableExists(ctx context.Context, table string) (bool, error) {
	var ok bool
	if s.dialect == outbox.Postgres {
		err := s.db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok)
		return ok, err
	}
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE`, table).Scan(&n)
	return n > 0, err
}

// Drop deletes the saga's table and every instance in it (not the inbox's
// or the outbox's). It is meant for tests and tear-downs.
func (s *Saga[S]) Drop(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+s.table); err != nil {
		return fmt.Errorf("saga: dropping table %s: %w", s.table, err)
	}
	return nil
}

// Get returns the instance with correlation ID id. When there is none, the
// error wraps ErrNotFound and names the saga and the ID. A state that does
// not decode into S is an error too.
func (s *Saga[S]) Get(ctx context.Context, id string) (*Snapshot[S], error) {
	snap, err := s.scan(ctx, s.db.QueryRowContext(ctx, s.get, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("saga: %w", &notFound{s.name, id})
	}
	if err != nil {
		return nil, fmt.Errorf("saga: reading %q with correlation ID %q: %w", s.name, id, err)
	}
	return snap, nil
}

// ListOptions says which instances List returns.
type ListOptions struct {
	// Open leaves out the completed instances.
	Open bool
	// Limit is the most instances returned: 1 to 10000, 0 for 100.
	Limit int
}

// maxList bounds ListOptions.Limit.
const maxList = 10000

// List returns instances of the saga, the least recently updated first
// (with Open, those waiting longest). An instance whose state does not
// decode into S makes List fail, naming it.
func (s *Saga[S]) List(ctx context.Context, lo ListOptions) ([]*Snapshot[S], error) {
	switch {
	case lo.Limit == 0:
		lo.Limit = 100
	case lo.Limit < 0 || lo.Limit > maxList:
		return nil, fmt.Errorf("saga: List of %q was given limit %d; want 1 to %d, or 0 for 100", s.name, lo.Limit, maxList)
	}
	q := s.list
	if lo.Open {
		q = s.listOpen
	}
	rows, err := s.db.QueryContext(ctx, q, lo.Limit)
	if err != nil {
		return nil, fmt.Errorf("saga: listing %q: %w", s.name, err)
	}
	defer rows.Close()
	var out []*Snapshot[S]
	for rows.Next() {
		snap, err := s.scan(ctx, rows)
		if err != nil {
			return nil, fmt.Errorf("saga: listing %q: %w", s.name, err)
		}
		out = append(out, snap)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("saga: listing %q: %w", s.name, err)
	}
	return out, nil
}

// CountOpen returns the number of instances not completed: what the
// acemq.saga.open gauge reports.
func (s *Saga[S]) CountOpen(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, s.countOpen).Scan(&n); err != nil {
		return 0, fmt.Errorf("saga: counting the open instances of %q: %w", s.name, err)
	}
	return n, nil
}

// scan reads one row of the get or list query.
func (s *Saga[S]) scan(ctx context.Context, row interface{ Scan(...any) error }) (*Snapshot[S], error) {
	var (
		snap             Snapshot[S]
		state            []byte
		created, updated dbTime
	)
	if err := row.Scan(&snap.ID, &state, &snap.Version, &snap.Done, &created, &updated); err != nil {
		return nil, err
	}
	if err := s.decodeState(ctx, snap.ID, state, &snap.State); err != nil {
		return nil, s.undecodable(snap.ID, err)
	}
	snap.Created, snap.Updated = created.t, updated.t
	return &snap, nil
}

// undecodable is the error of a stored state that does not decode into S.
func (s *Saga[S]) undecodable(id string, err error) error {
	var zero S
	return fmt.Errorf("the state of saga %q with correlation ID %q does not decode into %T: %w", s.name, id, zero, err)
}

// rebind gives q, written with ? placeholders, the dialect's.
func (s *Saga[S]) rebind(q string) string { return s.dialect.Rebind(q) }

// timeArg is how a time travels as an argument: a UTC time.Time on
// PostgreSQL, Unix microseconds on SQLite.
func (s *Saga[S]) timeArg(t time.Time) any { return s.dialect.TimeArg(t) }

// dbTime scans a time column of either dialect.
type dbTime struct{ t time.Time }

// Scan implements sql.Scanner.
func (d *dbTime) Scan(v any) error {
	switch x := v.(type) {
	case time.Time:
		d.t = x.UTC()
	case int64:
		d.t = time.UnixMicro(x).UTC()
	case nil:
		d.t = time.Time{}
	default:
		return fmt.Errorf("a %T is not a time", v)
	}
	return nil
}

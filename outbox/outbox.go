package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// DefaultTable is the outbox table's name unless Table says otherwise.
const DefaultTable = "acemq_outbox"

// DefaultInboxTable is the inbox table's name unless Table says otherwise.
const DefaultInboxTable = "acemq_inbox"

// Option configures an Outbox (New) or an Inbox (NewInbox).
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	table         string
	meterProvider metric.MeterProvider
	errs          []error
}

// Table sets the name of the table: acemq_outbox for an Outbox and
// acemq_inbox for an Inbox by default. The name must be a plain SQL
// identifier (letters, digits and underscores, not starting with a digit,
// at most 48 characters); anything else makes New or NewInbox fail. To use
// another PostgreSQL schema, set the connection's search_path.
func Table(name string) Option {
	return optionFunc(func(c *config) {
		if err := checkTable(name); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.table = name
	})
}

// WithMeterProvider sets where the outbox's instruments are created. The
// default is the global provider (otel.GetMeterProvider). An Inbox has no
// instruments and ignores it.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp == nil {
			c.errs = append(c.errs, errors.New("outbox: WithMeterProvider was given nil"))
			return
		}
		c.meterProvider = mp
	})
}

func newConfig(defaultTable string, opts []Option) (config, error) {
	cfg := config{table: defaultTable}
	for _, o := range opts {
		if o == nil {
			cfg.errs = append(cfg.errs, errors.New("outbox: a nil Option was given"))
			continue
		}
		o.apply(&cfg)
	}
	return cfg, errors.Join(cfg.errs...)
}

// Outbox is a table of messages waiting to be published, in the
// application's own database. Publishers write rows in the caller's
// transaction; a Relay publishes and deletes them. It is safe for
// concurrent use.
type Outbox struct {
	db      *sql.DB
	dialect Dialect
	table   string
	mp      metric.MeterProvider
	metrics *instruments
}

// New returns an Outbox over db. It neither connects nor creates anything:
// call Migrate once to create the table, or create it with your own
// migration tool from the statements Migrate runs. The Outbox registers an
// observable gauge of pending rows; Close unregisters it.
func New(db *sql.DB, dialect Dialect, opts ...Option) (*Outbox, error) {
	switch {
	case db == nil:
		return nil, errors.New("outbox: New was given a nil *sql.DB")
	case !dialect.valid():
		return nil, fmt.Errorf("outbox: New was given %v; want outbox.Postgres or outbox.SQLite", dialect)
	}
	cfg, err := newConfig(DefaultTable, opts)
	if err != nil {
		return nil, err
	}
	if cfg.meterProvider == nil {
		cfg.meterProvider = otel.GetMeterProvider()
	}
	o := &Outbox{db: db, dialect: dialect, table: cfg.table, mp: cfg.meterProvider}
	if o.metrics, err = newInstruments(cfg.meterProvider, o); err != nil {
		return nil, fmt.Errorf("outbox: creating the instruments of table %s: %w", o.table, err)
	}
	return o, nil
}

// TableName returns the name of the Outbox's table.
func (o *Outbox) TableName() string { return o.table }

// DB returns the database the Outbox writes to, the one given to New.
// Packages that keep their own tables beside the outbox's, in the same
// transactions (package saga), reach it here.
func (o *Outbox) DB() *sql.DB { return o.db }

// Dialect returns the Outbox's SQL dialect, the one given to New.
func (o *Outbox) Dialect() Dialect { return o.dialect }

// MeterProvider returns where the Outbox's instruments are created: the
// one WithMeterProvider gave, else the global provider at the time of New.
// Package saga creates its instruments there unless told otherwise.
func (o *Outbox) MeterProvider() metric.MeterProvider { return o.mp }

// Close unregisters the Outbox's pending-rows gauge. It does not close the
// database, which the Outbox does not own. Close is idempotent.
func (o *Outbox) Close() error { return o.metrics.close() }

// Migrate creates the outbox table and its indexes, if they do not exist,
// and brings a table made by an earlier version up to date: it adds the
// dead_at column and the claim index and drops the old due_at index. Every
// step is idempotent. Run it once at start-up (two processes migrating the
// same PostgreSQL database at the same instant may race on the catalog).
//
// The columns: id (bigserial / integer primary key autoincrement),
// message_id, exchange, routing_key, headers (the envelope as JSON),
// body, content_type, due_at, locked_until (a relay's lease), attempts,
// last_error, created_at and dead_at (set when a row is dead-lettered).
// The indexes: TABLE_due_idx on (due_at, id) for rows not dead, which the
// claim walks, and TABLE_dead_idx on dead_at for dead rows. On SQLite the
// time columns hold Unix microseconds.
func (o *Outbox) Migrate(ctx context.Context) error {
	if err := o.migrate(ctx); err != nil {
		return fmt.Errorf("outbox: migrating table %s: %w", o.table, err)
	}
	return nil
}

func (o *Outbox) migrate(ctx context.Context) error {
	id, ts, blob, js := o.dialect.types()
	t := o.table
	exec := func(stmt string) error {
		_, err := o.db.ExecContext(ctx, stmt)
		return err
	}
	if err := exec(fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id %s,
	message_id TEXT NOT NULL,
	exchange TEXT NOT NULL,
	routing_key TEXT NOT NULL,
	headers %s NOT NULL,
	body %s NOT NULL,
	content_type TEXT NOT NULL,
	due_at %s NOT NULL,
	locked_until %s,
	attempts INTEGER NOT NULL DEFAULT 0,
	last_error TEXT,
	created_at %s NOT NULL,
	dead_at %s
)`, t, id, js, blob, ts, ts, ts, ts)); err != nil {
		return err
	}
	// A table of an earlier version lacks dead_at. SQLite has no ADD
	// COLUMN IF NOT EXISTS: look first.
	addDead := fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS dead_at %s`, t, ts)
	if o.dialect == SQLite {
		var n int
		q := `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = 'dead_at'`
		if err := o.db.QueryRowContext(ctx, q, t).Scan(&n); err != nil {
			return err
		}
		addDead = ""
		if n == 0 {
			addDead = fmt.Sprintf(`ALTER TABLE %s ADD COLUMN dead_at %s`, t, ts)
		}
	}
	for _, stmt := range []string{
		addDead,
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %[1]s_due_idx ON %[1]s (due_at, id) WHERE dead_at IS NULL`, t),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %[1]s_dead_idx ON %[1]s (dead_at) WHERE dead_at IS NOT NULL`, t),
		// The index of earlier versions, on due_at alone, which the claim
		// index replaces.
		fmt.Sprintf(`DROP INDEX IF EXISTS %s_due_at_idx`, t),
	} {
		if stmt == "" {
			continue
		}
		if err := exec(stmt); err != nil {
			return err
		}
	}
	return nil
}

// Drop deletes the outbox table and everything in it. It is meant for
// tests and tear-downs.
func (o *Outbox) Drop(ctx context.Context) error {
	if _, err := o.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+o.table); err != nil {
		return fmt.Errorf("outbox: dropping table %s: %w", o.table, err)
	}
	return nil
}

// Pending returns the number of rows in the outbox waiting to be relayed:
// scheduled ones and failing ones included, dead-lettered ones (Dead) not.
func (o *Outbox) Pending(ctx context.Context) (int64, error) {
	var n int64
	if err := o.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+o.table+" WHERE dead_at IS NULL").Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: counting the rows of %s: %w", o.table, err)
	}
	return n, nil
}

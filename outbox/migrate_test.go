package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oldSchema creates table as Migrate did before dead_at and the claim
// index.
func oldSchema(t *testing.T, db *sql.DB, d outbox.Dialect, table string) {
	t.Helper()
	id, ts, blob, js := "BIGSERIAL PRIMARY KEY", "TIMESTAMPTZ", "BYTEA", "JSON"
	if d == outbox.SQLite {
		id, ts, blob, js = "INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER", "BLOB", "TEXT"
	}
	for _, stmt := range []string{
		fmt.Sprintf(`CREATE TABLE %s (id %s, message_id TEXT NOT NULL, exchange TEXT NOT NULL, routing_key TEXT NOT NULL,
	headers %s NOT NULL, body %s NOT NULL, content_type TEXT NOT NULL, due_at %s NOT NULL, locked_until %s,
	attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT, created_at %s NOT NULL)`, table, id, js, blob, ts, ts, ts),
		fmt.Sprintf(`CREATE INDEX %[1]s_due_at_idx ON %[1]s (due_at)`, table),
	} {
		_, err := db.ExecContext(t.Context(), stmt)
		require.NoError(t, err)
	}
}

// indexes returns the names of table's indexes, primary key aside.
func indexes(t *testing.T, db *sql.DB, d outbox.Dialect, table string) []string {
	t.Helper()
	q := `SELECT indexname FROM pg_indexes WHERE tablename = $1 AND indexname NOT LIKE '%_pkey' ORDER BY indexname`
	if d == outbox.SQLite {
		q = `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND name NOT LIKE 'sqlite_%' ORDER BY name`
	}
	rows, err := db.QueryContext(t.Context(), q, table)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestMigrateUpgradesATableOfAnEarlierVersion(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		table := tableName(t, "outbox_old")
		oldSchema(t, db, d, table)
		o, err := outbox.New(db, d, outbox.Table(table))
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, o.Drop(ctx))
			require.NoError(t, o.Close())
		})
		c := connect(t, acemqtest.Memory(t))
		col := collect(t, c, "orders")
		p := outbox.NewPublisher[Order](o, c, "", "orders")
		// A row written before the upgrade, with the old columns only.
		_, err = db.ExecContext(t.Context(), d2(d, `INSERT INTO `+table+` (message_id, exchange, routing_key, headers, body, content_type, due_at, created_at)
	VALUES ('old-1', '', 'orders', '{"id":"old-1","version":1,"attempt":1,"first_seen":"2025-01-01T00:00:00Z"}', ?, 'application/json', ?, ?)`),
			[]byte(`{"id":"old"}`), dbNow(d), dbNow(d))
		require.NoError(t, err)

		for range 2 { // idempotent
			require.NoError(t, o.Migrate(t.Context()))
		}
		assert.Equal(t, []string{table + "_dead_idx", table + "_due_idx"}, indexes(t, db, d, table))
		write(t, db, p, nil, Order{ID: "new"})
		runUntilCleanup(t, outbox.NewRelay(o, c, outbox.PollInterval(fastPoll), outbox.WithLogger(quiet)).Run)
		col.waitUnique(t, 2, 5*time.Second)
		_, ok := col.byOrder("old")
		assert.True(t, ok, "the row written before the upgrade was not relayed")
	})
}

// d2 turns ? placeholders into $n on PostgreSQL.
func d2(d outbox.Dialect, q string) string {
	if d != outbox.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// dbNow is the current time as the dialect's time columns take it.
func dbNow(d outbox.Dialect) any {
	if d == outbox.SQLite {
		return time.Now().UnixMicro()
	}
	return time.Now()
}

func TestClaimWalksTheDueIndexPastScheduledRows(t *testing.T) {
	db := openPostgres(t)
	o := newOutbox(t, db, outbox.Postgres)
	c := connect(t, acemqtest.Memory(t))
	// 20,000 rows scheduled for tomorrow with the lowest ids, then 300 due.
	for _, stmt := range []string{
		`INSERT INTO ` + o.TableName() + ` (message_id, exchange, routing_key, headers, body, content_type, due_at, created_at)
	SELECT 's' || g, '', 'q', '{}', '\x7b7d', 'application/json', now() + interval '1 day', now() FROM generate_series(1, 20000) g`,
		`INSERT INTO ` + o.TableName() + ` (message_id, exchange, routing_key, headers, body, content_type, due_at, created_at)
	SELECT 'd' || g, '', 'q', '{}', '\x7b7d', 'application/json', now() - interval '1 second', now() FROM generate_series(1, 300) g`,
		`ANALYZE ` + o.TableName(),
	} {
		_, err := db.ExecContext(t.Context(), stmt)
		require.NoError(t, err)
	}
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var plan string
	claim := outbox.ClaimSQLForTest(outbox.NewRelay(o, c))
	require.NoError(t, tx.QueryRowContext(t.Context(), "EXPLAIN (ANALYZE, FORMAT JSON) "+claim, int64(30e6), 256).Scan(&plan))
	assert.Contains(t, plan, `"Index Name": "`+o.TableName()+`_due_idx"`, "the claim does not walk the due index")
	assert.NotContains(t, plan, `"Seq Scan"`)
	assert.NotContains(t, plan, `"Rows Removed by Filter": 20000`, "the claim read the scheduled rows")
}

package saga_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// quiet drops the warnings tests provoke on purpose.
var quiet = slog.New(slog.DiscardHandler)

// database is one dialect's test database.
type database struct {
	name    string
	dialect outbox.Dialect
	open    func(t testing.TB) *sql.DB
}

// databases are the dialects a test runs on: SQLite always, PostgreSQL
// when acemqtest finds one (the subtest is skipped otherwise).
var databases = []database{
	{name: "sqlite", dialect: outbox.SQLite, open: openSQLite},
	{name: "postgres", dialect: outbox.Postgres, open: openPostgres},
}

// eachDatabase runs fn as a parallel subtest per dialect.
func eachDatabase(t *testing.T, fn func(t *testing.T, db *sql.DB, d outbox.Dialect)) {
	t.Helper()
	for _, tc := range databases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fn(t, tc.open(t), tc.dialect)
		})
	}
}

// openSQLite opens a database file in a temporary directory, as SQLite
// with database/sql wants it: a busy timeout and one connection.
func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "saga.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openPostgres(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", acemqtest.Postgres(t))
	require.NoError(t, err)
	db.SetMaxOpenConns(20)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(t.Context()))
	return db
}

// unique is base with a random suffix: a table or saga of the test's own.
func unique(t testing.TB, base string) string {
	t.Helper()
	var b [5]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return base + "_" + hex.EncodeToString(b[:])
}

// fixture is an outbox, an inbox and a saga, in tables of the test's own,
// dropped when it ends.
type fixture[S any] struct {
	db    *sql.DB
	ob    *outbox.Outbox
	inbox *outbox.Inbox
	saga  *saga.Saga[S]
}

func newFixture[S any](t testing.TB, db *sql.DB, d outbox.Dialect, opts ...saga.Option) *fixture[S] {
	t.Helper()
	ctx := t.Context()
	ob, err := outbox.New(db, d, outbox.Table(unique(t, "saga_outbox")))
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(ctx))
	in, err := outbox.NewInbox(db, d, outbox.Table(unique(t, "saga_inbox")))
	require.NoError(t, err)
	s, err := saga.New[S](ob, unique(t, "t"), append([]saga.Option{saga.WithInbox(in)}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Drop(ctx))
		require.NoError(t, in.Drop(ctx))
		require.NoError(t, ob.Drop(ctx))
		require.NoError(t, s.Close())
		require.NoError(t, ob.Close())
	})
	return &fixture[S]{db: db, ob: ob, inbox: in, saga: s}
}

// connect opens a Conn to url and closes it when the test ends.
func connect(t testing.TB, url string, opts ...acemq.ConnOption) *acemq.Conn {
	t.Helper()
	opts = append([]acemq.ConnOption{acemq.WithLogger(quiet)}, opts...)
	c, err := acemq.Connect(t.Context(), url, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// message builds the Message a consumer would hand the handler.
func message[T any](id, correlationID string, payload T) *acemq.Message[T] {
	return &acemq.Message[T]{
		Payload: payload,
		Queue:   "saga-test",
		Envelope: &acemq.Envelope{ID: id, CorrelationID: correlationID, Type: "test", Version: 1, Attempt: 1,
			FirstSeen: time.Now().UTC(), Headers: map[string]any{}},
	}
}

// byCorrelationID is the correlate function of most tests.
func byCorrelationID[T any](m *acemq.Message[T]) string { return m.Envelope.CorrelationID }

// outboxIDs returns how many outbox rows each message ID has.
func (f *fixture[S]) outboxIDs(t *testing.T) map[string]int {
	t.Helper()
	rows, err := f.db.QueryContext(t.Context(), "SELECT message_id FROM "+f.ob.TableName())
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		out[id]++
	}
	require.NoError(t, rows.Err())
	return out
}

package outbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

// TestMain checks for leaks, then removes the containers acemqtest started
// (when no local PostgreSQL or RabbitMQ answered).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if err := acemqtest.Cleanup(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = max(code, 1)
		}
		os.Exit(code)
	}))
}

// quiet drops the warnings tests provoke on purpose.
var quiet = slog.New(slog.DiscardHandler)

// Order is the payload the tests write.
type Order struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}

// database is one dialect's test database.
type database struct {
	name    string
	dialect outbox.Dialect
	open    func(t *testing.T) *sql.DB
}

// databases are the dialects a test runs on: SQLite always, PostgreSQL when
// acemqtest finds one (the subtest is skipped otherwise).
var databases = []database{
	{name: "sqlite", dialect: outbox.SQLite, open: openSQLite},
	{name: "postgres", dialect: outbox.Postgres, open: openPostgres},
}

// eachDatabase runs fn as a subtest per dialect.
func eachDatabase(t *testing.T, fn func(t *testing.T, db *sql.DB, d outbox.Dialect)) {
	t.Helper()
	for _, tc := range databases {
		t.Run(tc.name, func(t *testing.T) {
			fn(t, tc.open(t), tc.dialect)
		})
	}
}

// openSQLite opens a database file in a temporary directory, as SQLite
// with database/sql wants it: a busy timeout and one connection.
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", acemqtest.Postgres(t))
	require.NoError(t, err)
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(t.Context()))
	return db
}

// tableName is a table of the test's own.
func tableName(t testing.TB, base string) string {
	t.Helper()
	var b [5]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return base + "_" + hex.EncodeToString(b[:])
}

// newOutbox migrates an outbox in a table of the test's own and drops it
// when the test ends.
func newOutbox(t *testing.T, db *sql.DB, d outbox.Dialect, opts ...outbox.Option) *outbox.Outbox {
	t.Helper()
	opts = append([]outbox.Option{outbox.Table(tableName(t, "outbox_test"))}, opts...)
	o, err := outbox.New(db, d, opts...)
	require.NoError(t, err)
	require.NoError(t, o.Migrate(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, o.Drop(ctx))
		require.NoError(t, o.Close())
	})
	return o
}

// connect opens a Conn to url and closes it when the test ends.
func connect(t *testing.T, url string, opts ...acemq.ConnOption) *acemq.Conn {
	t.Helper()
	opts = append([]acemq.ConnOption{acemq.WithLogger(quiet)}, opts...)
	c, err := acemq.Connect(t.Context(), url, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// received is what a collector saw of one delivery.
type received struct {
	env  *acemq.Envelope
	body []byte
	at   time.Time
}

// collector consumes a queue and remembers every delivery.
type collector struct {
	mu    sync.Mutex
	got   []received
	count map[string]int
}

// collect declares queue on c and records its deliveries until the test
// ends.
func collect(t *testing.T, c *acemq.Conn, queue string) *collector {
	t.Helper()
	col := &collector{count: make(map[string]int)}
	cons, err := acemq.NewConsumer[acemq.Raw](c, queue, func(_ context.Context, m *acemq.Message[acemq.Raw]) acemq.Ack {
		col.mu.Lock()
		defer col.mu.Unlock()
		col.got = append(col.got, received{env: m.Envelope, body: m.Payload, at: time.Now()})
		col.count[m.Envelope.ID]++
		return acemq.Done()
	}, acemq.Concurrency(4), acemq.Prefetch(512))
	require.NoError(t, err)
	runUntilCleanup(t, cons.Run)
	return col
}

// runUntilCleanup runs fn in a goroutine until the test ends and checks
// that it returned nil.
func runUntilCleanup(t *testing.T, fn func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// unique is how many distinct IDs arrived; dups how many deliveries beyond
// the first of an ID.
func (c *collector) unique() (unique, dups int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.count {
		unique++
		dups += n - 1
	}
	return unique, dups
}

// byOrder returns the first delivery of the Order with the given ID.
func (c *collector) byOrder(id string) (received, bool) {
	for _, r := range c.all() {
		var o Order
		if json.Unmarshal(r.body, &o) == nil && o.ID == id {
			return r, true
		}
	}
	return received{}, false
}

func (c *collector) all() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]received(nil), c.got...)
}

// waitUnique waits until n distinct IDs arrived.
func (c *collector) waitUnique(t *testing.T, n int, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { u, _ := c.unique(); return u >= n }, within, 5*time.Millisecond,
		"waiting for %d distinct messages", n)
}

// write sends each value through p in one committed transaction.
func write[T any](t *testing.T, db *sql.DB, p *outbox.Publisher[T], opts []acemq.SendOption, vs ...T) {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	for _, v := range vs {
		require.NoError(t, p.Send(t.Context(), tx, v, opts...))
	}
	require.NoError(t, tx.Commit())
}

// storedIDs returns the message IDs in the outbox table, in id order.
func storedIDs(t *testing.T, db *sql.DB, o *outbox.Outbox) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SELECT message_id FROM "+o.TableName()+" ORDER BY id")
	require.NoError(t, err)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

package blob_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/blob"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

// TestMain checks for leaks, then removes the containers acemqtest started
// (when no local PostgreSQL answered).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if err := acemqtest.Cleanup(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = max(code, 1)
		}
		os.Exit(code)
	}))
}

// openSQLite opens a database file in a temporary directory, as SQLite
// with database/sql wants it: a busy timeout and one connection.
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "blob.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// openPostgres opens the test database acemqtest finds; the test is
// skipped when there is none, unless ACEMQ_REQUIRE_BROKER is set.
func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", acemqtest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { _ = db.Close() })
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	return db
}

// tableName is a table of the test's own.
func tableName(t testing.TB) string {
	t.Helper()
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "blob_test_" + hex.EncodeToString(b[:])
}

// newSQLStore migrates an SQL store in tables of the test's own in db and
// drops them when the test ends.
func newSQLStore(t *testing.T, db *sql.DB, d blob.SQLDialect) *blob.SQLStore {
	t.Helper()
	s, err := blob.SQLDB(db, d, blob.SQLTable(tableName(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Drop(ctx); err != nil {
			t.Error(err)
		}
	})
	return s
}

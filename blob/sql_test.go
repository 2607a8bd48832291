package blob_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/blob/blobtest"
	"github.com/acemq/acemq/outbox"
)

func TestSQLConformance(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dialect blob.SQLDialect
		open    func(*testing.T) *sql.DB
		opts    []blobtest.Option
	}{
		{"sqlite", blob.SQLite, openSQLite, nil},
		{"postgres", blob.Postgres, openPostgres, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := tc.open(t)
			blobtest.Run(t, func(t *testing.T) blob.Store { return newSQLStore(t, db, tc.dialect) }, tc.opts...)
		})
	}
}

func TestSQLWithoutMigrate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dialect blob.SQLDialect
		open    func(*testing.T) *sql.DB
	}{
		{"sqlite", blob.SQLite, openSQLite},
		{"postgres", blob.Postgres, openPostgres},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := tableName(t)
			s, err := blob.SQLDB(tc.open(t), tc.dialect, blob.SQLTable(table))
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			_, putErr := s.Put(ctx, "x", strings.NewReader("abc"), time.Time{})
			_, openErr := s.Open(ctx, "x", 0)
			var expErr error
			for _, err := range s.Expired(ctx, time.Now()) {
				expErr = err
			}
			for name, err := range map[string]error{"Put": putErr, "Open": openErr, "Delete": s.Delete(ctx, "x"), "Expired": expErr,
				"CheckTables": s.CheckTables(ctx)} {
				if !errors.Is(err, blob.ErrNotMigrated) || !strings.Contains(err.Error(), "Migrate") || !strings.Contains(err.Error(), table) {
					t.Errorf("%s before Migrate: %v; want an error wrapping blob.ErrNotMigrated naming the table", name, err)
				}
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Drop(context.WithoutCancel(ctx)) }()
			if err := s.CheckTables(ctx); err != nil {
				t.Errorf("CheckTables after Migrate: %v", err)
			}
		})
	}
}

func TestSQLOptions(t *testing.T) {
	db := openSQLite(t)
	for _, name := range []string{"", "1abc", "a-b", "a;drop", strings.Repeat("a", 41)} {
		if _, err := blob.SQLDB(db, blob.SQLite, blob.SQLTable(name)); err == nil {
			t.Errorf("SQLTable(%q) was accepted; want an error", name)
		}
	}
	for _, tc := range []struct {
		name    string
		db      *sql.DB
		dialect blob.SQLDialect
		opts    []blob.SQLOption
		want    string
	}{
		{"nil db", nil, blob.SQLite, nil, "nil *sql.DB"},
		{"zero dialect", db, 0, nil, "SQLDialect(0)"},
		{"unknown dialect", db, 3, nil, "SQLDialect(3)"},
		{"nil option", db, blob.SQLite, []blob.SQLOption{nil}, "nil SQLOption"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := blob.SQLDB(tc.db, tc.dialect, tc.opts...)
			if err == nil || !strings.HasPrefix(err.Error(), "blob: SQLDB ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SQLDB = %v; want an error from SQLDB naming %q", err, tc.want)
			}
		})
	}
	s, err := blob.SQLDB(db, blob.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if s.TableName() != blob.DefaultSQLTable {
		t.Errorf("TableName() = %q; want %q", s.TableName(), blob.DefaultSQLTable)
	}
}

// SQLDialect's values are outbox.Dialect's, as its doc promises, so a
// store in an outbox's database is built by converting the outbox's.
func TestSQLDialectMatchesTheOutbox(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    outbox.Dialect
		b    blob.SQLDialect
	}{
		{"postgres", outbox.Postgres, blob.Postgres},
		{"sqlite", outbox.SQLite, blob.SQLite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := blob.SQLDialect(tc.o); got != tc.b || got.String() != tc.o.String() {
				t.Errorf("blob.SQLDialect(outbox.%v) = %v; want %v", tc.o, got, tc.b)
			}
		})
	}
}

// A chunk row that does not hold the bytes the object row promises is
// found by the reader: ErrCorrupt, never a short object read as whole.
func TestSQLTruncatedChunk(t *testing.T) {
	db := openSQLite(t)
	s := newSQLStore(t, db, blob.SQLite)
	data := bytes.Repeat([]byte("x"), blob.ChunkSize+10)
	if _, err := s.Put(t.Context(), "t", bytes.NewReader(data), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), `UPDATE `+s.TableName()+`_chunk SET data = X'00' WHERE seq = 1`); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Open(t.Context(), "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	if _, err := io.Copy(io.Discard, rc); !errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("reading a truncated chunk: %v; want blob.ErrCorrupt", err)
	}
}

// Open streams: the rows of an object replaced after Open are gone, and
// the reader says so instead of mixing two Puts' bytes.
func TestSQLReplacedWhileReading(t *testing.T) {
	s := newSQLStore(t, openSQLite(t), blob.SQLite)
	ctx := t.Context()
	if _, err := s.Put(ctx, "r", bytes.NewReader(bytes.Repeat([]byte("a"), 3*blob.ChunkSize)), time.Time{}); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Open(ctx, "r", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	if _, err := io.ReadFull(rc, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "r", bytes.NewReader(bytes.Repeat([]byte("b"), 3*blob.ChunkSize)), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, rc); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("reading past the first chunk after a replacing Put: %v; want blob.ErrNotFound", err)
	}
}

package blob_test

import (
	"bytes"
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
		dialect outbox.Dialect
		open    func(*testing.T) *sql.DB
		opts    []blobtest.Option
	}{
		{"sqlite", outbox.SQLite, openSQLite, nil},
		{"postgres", outbox.Postgres, openPostgres, nil},
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
		dialect outbox.Dialect
		open    func(*testing.T) *sql.DB
	}{
		{"sqlite", outbox.SQLite, openSQLite},
		{"postgres", outbox.Postgres, openPostgres},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := outbox.New(tc.open(t), tc.dialect)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = o.Close() }()
			table := tableName(t)
			s, err := blob.SQL(o, blob.SQLTable(table))
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
			for name, err := range map[string]error{"Put": putErr, "Open": openErr, "Delete": s.Delete(ctx, "x"), "Expired": expErr} {
				if !errors.Is(err, blob.ErrNotMigrated) || !strings.Contains(err.Error(), "Migrate") || !strings.Contains(err.Error(), table) {
					t.Errorf("%s before Migrate: %v; want an error wrapping blob.ErrNotMigrated naming the table", name, err)
				}
			}
		})
	}
}

func TestSQLOptions(t *testing.T) {
	o, err := outbox.New(openSQLite(t), outbox.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = o.Close() }()
	for _, name := range []string{"", "1abc", "a-b", "a;drop", strings.Repeat("a", 41)} {
		if _, err := blob.SQL(o, blob.SQLTable(name)); err == nil {
			t.Errorf("SQLTable(%q) was accepted; want an error", name)
		}
	}
	if _, err := blob.SQL(nil); err == nil {
		t.Error("SQL(nil) succeeded; want an error")
	}
	if _, err := blob.SQL(o, nil); err == nil {
		t.Error("SQL with a nil SQLOption succeeded; want an error")
	}
	s, err := blob.SQL(o)
	if err != nil {
		t.Fatal(err)
	}
	if s.TableName() != blob.DefaultSQLTable {
		t.Errorf("TableName() = %q; want %q", s.TableName(), blob.DefaultSQLTable)
	}
}

// A chunk row that does not hold the bytes the object row promises is
// found by the reader: ErrCorrupt, never a short object read as whole.
func TestSQLTruncatedChunk(t *testing.T) {
	db := openSQLite(t)
	s := newSQLStore(t, db, outbox.SQLite)
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
	s := newSQLStore(t, openSQLite(t), outbox.SQLite)
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

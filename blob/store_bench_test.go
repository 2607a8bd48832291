package blob_test

import (
	"context"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/blob"
)

// BenchmarkStoreRoundTrip puts 64 MiB into each store and reads it back;
// "file" is the baseline, io.Copy into a file (fsynced, as Dir does) and out
// of it again, in the same run. Compare the stores' MB/s with the file's:
//
//	go test -run '^$' -bench StoreRoundTrip -benchtime 3x ./blob/
func BenchmarkStoreRoundTrip(b *testing.B) {
	const size = 64 << 20
	b.Run("file", func(b *testing.B) {
		dir := b.TempDir()
		b.SetBytes(size)
		for i := 0; b.Loop(); i++ {
			p := filepath.Join(dir, "f")
			f, err := os.Create(p)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(f, io.LimitReader(zeros{}, size)); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
			f, err = os.Open(p)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, f); err != nil {
				b.Fatal(err)
			}
			_ = f.Close()
		}
	})
	stores := []struct {
		name string
		new  func(b *testing.B) blob.Store
	}{
		{"memory", func(*testing.B) blob.Store { return blob.Memory() }},
		{"dir", func(b *testing.B) blob.Store {
			s, err := blob.Dir(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"sqlite", func(b *testing.B) blob.Store { return benchSQL(b, blob.SQLite) }},
		{"postgres", func(b *testing.B) blob.Store { return benchSQL(b, blob.Postgres) }},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			s := st.new(b)
			ctx := b.Context()
			b.SetBytes(size)
			for b.Loop() {
				if _, err := s.Put(ctx, "bench", io.LimitReader(zeros{}, size), time.Time{}); err != nil {
					b.Fatal(err)
				}
				rc, err := s.Open(ctx, "bench", 0)
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, rc); err != nil || n != size {
					b.Fatalf("read %d bytes: %v", n, err)
				}
				_ = rc.Close()
			}
		})
	}
}

// benchSQL is an SQL store in tables of its own, dropped afterwards.
func benchSQL(b *testing.B, d blob.SQLDialect) blob.Store {
	var db *sql.DB
	var err error
	if d == blob.SQLite {
		db, err = sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "bench.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
		db.SetMaxOpenConns(1)
	} else {
		db, err = sql.Open("pgx", acemqtest.Postgres(b))
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	s, err := blob.SQLDB(db, d, blob.SQLTable(tableName(b)))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Drop(context.Background()) })
	return s
}

// zeros yields zero bytes without end.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

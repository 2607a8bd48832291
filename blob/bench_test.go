package blob_test

import (
	"context"
	"database/sql"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/blob"
)

// BenchmarkPayload1GiB streams 1 GiB through Send and a handler's Reader
// (which checks the SHA-256), and, in the same op on the same store, the
// baseline: io.Copy of the same bytes into the store (Put) and out of it
// (Open, to io.Discard), each twice, in the order copy, blob, blob, copy. It reports both rates, their ratio
// (blob/copy; the target is 0.8 or more) and the peak heap of the blob
// run.
func BenchmarkPayload1GiB(b *testing.B) {
	const size = 1 << 30
	for _, sk := range []struct {
		name string
		new  func(b *testing.B) blob.Store
	}{{"dir", benchDir}, {"postgres", benchPostgres}} {
		b.Run(sk.name, func(b *testing.B) {
			s := sk.new(b)
			c := connect(b, "memory://")
			q := acemqtest.QueueName(b, "bench-blob")
			done := make(chan error, 1)
			h := blob.Handle(s, func(_ context.Context, _ *acemq.Message[meta], body *blob.Reader) acemq.Ack {
				_, err := io.Copy(io.Discard, body)
				done <- err
				return acemq.Done()
			}, blob.DeleteOnDone())
			cons, err := acemq.NewConsumer(c, q, h)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() { ran <- cons.Run(ctx) }()
			defer func() { cancel(); <-ran }()
			p := blob.NewPublisher[meta](c, s, "", q)
			var copyTime, blobTime time.Duration
			var peak uint64
			b.SetBytes(4 * size)
			b.ResetTimer()
			copyOnce := func(i int) {
				start := time.Now()
				id := "bench-copy"
				if _, err := s.Put(b.Context(), id, payload(uint64(i), size), time.Now().Add(time.Hour)); err != nil {
					b.Fatal(err)
				}
				rc, err := s.Open(b.Context(), id, 0)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, rc); err != nil {
					b.Fatal(err)
				}
				_ = rc.Close()
				copyTime += time.Since(start)
				if err := s.Delete(b.Context(), id); err != nil {
					b.Fatal(err)
				}
			}
			blobOnce := func(i int) {
				runtime.GC()
				heap := sampleHeap()
				start := time.Now()
				if _, err := p.Send(b.Context(), meta{}, payload(uint64(i), size)); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				blobTime += time.Since(start)
				peak = max(peak, heap.end())
			}
			for i := range b.N {
				// copy, blob, blob, copy: neither gains from going first
				// (a warm cache, a quiet disk) on a machine that is shared.
				copyOnce(i)
				blobOnce(i)
				blobOnce(i)
				copyOnce(i)
			}
			b.StopTimer()
			mb := 2 * float64(size) * float64(b.N) / 1e6 // each path ran twice
			b.ReportMetric(mb/copyTime.Seconds(), "copy-MB/s")
			b.ReportMetric(mb/blobTime.Seconds(), "blob-MB/s")
			b.ReportMetric(copyTime.Seconds()/blobTime.Seconds(), "ratio")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}

func benchDir(b *testing.B) blob.Store {
	s, err := blob.Dir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchPostgres is an SQL store in PostgreSQL, in a table of the
// benchmark's own, dropped after it.
func benchPostgres(b *testing.B) blob.Store {
	db, err := sql.Open("pgx", acemqtest.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	s, err := blob.SQLDB(db, blob.Postgres, blob.SQLTable(tableName(b)))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Drop(ctx)
	})
	return s
}

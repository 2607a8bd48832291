package blob_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/require"
)

// The code of docs/payloads.md, as the page shows it, in functions that
// return their error; TestPayloadsPageRecipes runs them.

// streamReports is the streaming recipe: a consumer of the queue
// "reports" copies each report to dst as it streams in, and a Publisher
// sends file to that queue. It returns the consumer, for the caller to
// Run, and the Ref of the report sent.
func streamReports(ctx context.Context, conn *acemq.Conn, dir string, file io.Reader, dst io.Writer) (*acemq.Consumer[blob.Envelope[ReportReady]], blob.Ref, error) {
	s, err := blob.Dir(dir) // or blob.SQLDB(db, blob.Postgres), gocloud.Bucket(b)
	if err != nil {
		return nil, blob.Ref{}, err
	}
	consumer, err := acemq.NewConsumer(conn, "reports", blob.Handle(s,
		func(ctx context.Context, m *acemq.Message[ReportReady], body *blob.Reader) acemq.Ack {
			_, err := io.Copy(dst, body) // nil only when size and SHA-256 matched
			return acemq.AckOf(err)
		}))
	if err != nil {
		return nil, blob.Ref{}, err
	}
	// "" is the default exchange: the routing key "reports" is the queue.
	p := blob.NewPublisher[ReportReady](conn, s, "", "reports")
	ref, err := p.Send(ctx, ReportReady{Quarter: "2026-Q4"}, file) // any io.Reader
	return consumer, ref, err
}

// reportThroughOutbox is the outbox recipe: the bytes are stored first,
// outside the transaction, and the Envelope naming them is written in it.
func reportThroughOutbox(ctx context.Context, ob *outbox.Outbox, conn *acemq.Conn, s blob.Store, file io.Reader, meta ReportReady) error {
	ref, err := blob.Put(ctx, s, file) // outside the transaction
	if err != nil {
		return err
	}
	p := outbox.NewPublisher[blob.Envelope[ReportReady]](ob, conn, "", "reports")
	tx, err := ob.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // a rollback leaves an orphan object to expiry
	if err := p.Send(ctx, tx, blob.Envelope[ReportReady]{Meta: meta, Ref: ref}); err != nil {
		return err
	}
	return tx.Commit() // the relay publishes it
}

// connectClaimChecked is the claim-check recipe.
func connectClaimChecked(ctx context.Context, url string, s blob.Store) (*acemq.Conn, error) {
	conn, err := acemq.Connect(ctx, url, blob.WithClaimCheck(s, 0)) // 0: 256 KiB
	return conn, err
}

// connectDeletingAfterAck is the claim-check recipe for a route with one
// consumer: each object is deleted once its message was acked.
func connectDeletingAfterAck(ctx context.Context, url string, s blob.Store) (*acemq.Conn, error) {
	conn, err := acemq.Connect(ctx, url, blob.WithClaimCheck(s, 0, blob.DeleteOnDone()))
	return conn, err
}

// lockedHash is a SHA-256 a handler writes to and the test reads.
type lockedHash struct {
	mu sync.Mutex
	n  int64
	w  io.Writer
}

func (l *lockedHash) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n += int64(len(p))
	return l.w.Write(p)
}

// TestPayloadsPageRecipes runs the recipes of docs/payloads.md on
// memory://: the streaming recipe's report reaches its consumer whole, the
// outbox recipe's message is relayed and read, and a Conn made by each
// claim-check recipe sends a large typed message that arrives whole, the
// second deleting its object after the ack.
func TestPayloadsPageRecipes(t *testing.T) {
	ctx := t.Context()
	t.Run("stream", func(t *testing.T) {
		conn := connect(t, brokers[0].url(t))
		h := sha256.New()
		dst := &lockedHash{w: h}
		consumer, ref, err := streamReports(ctx, conn, t.TempDir(), payload(21, 3<<20), dst)
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- consumer.Run(rctx) }()
		defer func() { cancel(); require.NoError(t, <-done) }()
		require.Eventually(t, func() bool {
			dst.mu.Lock()
			defer dst.mu.Unlock()
			return dst.n == 3<<20
		}, 20*time.Second, 10*time.Millisecond)
		require.Equal(t, digest(t, 21, 3<<20), ref.SHA256)
		require.Equal(t, ref.SHA256, hex.EncodeToString(h.Sum(nil)))
	})
	t.Run("outbox", func(t *testing.T) {
		conn := connect(t, brokers[0].url(t))
		db := openSQLite(t)
		ob, err := outbox.New(db, outbox.SQLite)
		require.NoError(t, err)
		t.Cleanup(func() { _ = ob.Close() })
		require.NoError(t, ob.Migrate(ctx))
		s := newSQLStore(t, db, blob.SQLite)
		got := make(chan string, 1)
		run(t, conn, "reports", blob.Handle(s, func(_ context.Context, m *acemq.Message[ReportReady], body *blob.Reader) acemq.Ack {
			_, d, err := readAll(body)
			if err != io.EOF {
				return acemq.Retry(err)
			}
			got <- m.Payload.Quarter + " " + d
			return acemq.Done()
		}))
		rctx, stop := context.WithCancel(context.Background())
		relayed := make(chan error, 1)
		go func() { relayed <- outbox.NewRelay(ob, conn, outbox.PollInterval(10*time.Millisecond)).Run(rctx) }()
		defer func() { stop(); require.NoError(t, <-relayed) }()
		require.NoError(t, reportThroughOutbox(ctx, ob, conn, s, payload(22, 2<<20), ReportReady{Quarter: "2026-Q3"}))
		select {
		case g := <-got:
			require.Equal(t, "2026-Q3 "+digest(t, 22, 2<<20), g)
		case <-time.After(20 * time.Second):
			t.Fatal("the relayed message was not handled")
		}
	})
	for _, tc := range []struct {
		name    string
		connect func(context.Context, string, blob.Store) (*acemq.Conn, error)
		left    int
	}{{"claim check", connectClaimChecked, 1}, {"claim check deleting after the ack", connectDeletingAfterAck, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			s := blob.Memory()
			conn, err := tc.connect(ctx, brokers[0].url(t), s)
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close() })
			got := make(chan Report, 1)
			run(t, conn, "reports", func(_ context.Context, m *acemq.Message[Report]) acemq.Ack {
				got <- m.Payload
				return acemq.Done()
			})
			big := Report{Title: "Q4", Rows: bytes.Repeat([]byte("row\n"), 100<<10)}
			require.NoError(t, acemq.NewPublisher[Report](conn, "", "reports").Send(ctx, big))
			select {
			case r := <-got:
				require.Equal(t, big, r)
			case <-time.After(20 * time.Second):
				t.Fatal("not handled")
			}
			if tc.left == 0 {
				require.Eventually(t, func() bool { return len(ids(t, s)) == 0 }, 5*time.Second, 10*time.Millisecond, "deleted after the ack")
			} else {
				time.Sleep(100 * time.Millisecond) // time for a delete that must not come
				require.Len(t, ids(t, s), tc.left, "kept until its expiry and a Sweep")
			}
		})
	}
}

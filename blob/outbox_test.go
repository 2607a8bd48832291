package blob_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/require"
)

// TestThroughAnOutbox is the outbox recipe: Put the bytes, then send the
// Envelope in the caller's transaction; the relay publishes it after the
// commit, and Handle reads the object. A rolled-back transaction sends
// nothing (its object is left to expiry).
func TestThroughAnOutbox(t *testing.T) {
	ctx := t.Context()
	url := "memory://" + t.Name()
	c := connect(t, url)
	q := queue(t, url, "blob-outbox")
	db := openSQLite(t)
	o, err := outbox.New(db, outbox.SQLite, outbox.Table(tableName(t)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	require.NoError(t, o.Migrate(ctx))
	s := newSQLStore(t, db, blob.SQLite) // the objects in the same database

	got := make(chan string, 2)
	run(t, c, q, blob.Handle(s, func(_ context.Context, m *acemq.Message[meta], body *blob.Reader) acemq.Ack {
		_, d, err := readAll(body)
		if err != io.EOF {
			return acemq.Retry(err)
		}
		got <- m.Payload.Name + " " + d
		return acemq.Done()
	}))
	rctx, stop := context.WithCancel(context.Background())
	relayed := make(chan error, 1)
	go func() { relayed <- outbox.NewRelay(o, c).Run(rctx) }()
	defer func() { stop(); require.NoError(t, <-relayed) }()

	p := outbox.NewPublisher[blob.Envelope[meta]](o, c, "", q)
	for _, name := range []string{"rolled back", "committed"} {
		ref, err := blob.Put(ctx, s, payload(8, 2<<20))
		require.NoError(t, err)
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, p.Send(ctx, tx, blob.Envelope[meta]{Meta: meta{Name: name}, Ref: ref}))
		if name == "committed" {
			require.NoError(t, tx.Commit())
		} else {
			require.NoError(t, tx.Rollback())
		}
	}
	select {
	case g := <-got:
		require.Equal(t, "committed "+digest(t, 8, 2<<20), g)
	case <-time.After(20 * time.Second):
		t.Fatal("the relayed message was not handled")
	}
	select {
	case g := <-got:
		t.Fatalf("a rolled-back send was handled: %s", g)
	case <-time.After(200 * time.Millisecond):
	}
}

package outbox_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/patterns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newInbox migrates an inbox in a table of the test's own and drops it when
// the test ends.
func newInbox(t *testing.T, db *sql.DB, d outbox.Dialect) *outbox.Inbox {
	t.Helper()
	in, err := outbox.NewInbox(db, d, outbox.Table(tableName(t, "inbox_test")))
	require.NoError(t, err)
	require.NoError(t, in.Migrate(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, in.Drop(ctx))
	})
	return in
}

func TestInboxClaimCompleteRelease(t *testing.T) {
	const short = 50 * time.Millisecond
	type step struct {
		op   string // claim, complete, release, sleep
		d    time.Duration
		want patterns.ClaimResult
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "a new key is claimed, then in progress", steps: []step{
			{op: "claim", d: time.Minute, want: patterns.Claimed},
			{op: "claim", d: time.Minute, want: patterns.InProgress},
		}},
		{name: "a completed key is a duplicate while kept", steps: []step{
			{op: "claim", d: time.Minute, want: patterns.Claimed},
			{op: "complete", d: time.Minute},
			{op: "claim", d: time.Minute, want: patterns.Duplicate},
		}},
		{name: "a released key can be claimed at once", steps: []step{
			{op: "claim", d: time.Minute, want: patterns.Claimed},
			{op: "release"},
			{op: "claim", d: time.Minute, want: patterns.Claimed},
		}},
		{name: "release does not forget a completed key", steps: []step{
			{op: "claim", d: time.Minute, want: patterns.Claimed},
			{op: "complete", d: time.Minute},
			{op: "release"},
			{op: "claim", d: time.Minute, want: patterns.Duplicate},
		}},
		{name: "an abandoned claim is taken over once its lease ends", steps: []step{
			{op: "claim", d: short, want: patterns.Claimed},
			{op: "sleep", d: 2 * short},
			{op: "claim", d: time.Minute, want: patterns.Claimed},
		}},
		{name: "a completion is forgotten once its keep ends", steps: []step{
			{op: "claim", d: time.Minute, want: patterns.Claimed},
			{op: "complete", d: short},
			{op: "sleep", d: 2 * short},
			{op: "claim", d: time.Minute, want: patterns.Claimed},
		}},
		{name: "complete without a claim", steps: []step{
			{op: "complete", d: time.Minute},
			{op: "claim", d: time.Minute, want: patterns.Duplicate},
		}},
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		in := newInbox(t, db, d)
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				key := acemqtest.QueueName(t, "key")
				ctx := t.Context()
				for i, s := range tc.steps {
					switch s.op {
					case "claim":
						got, err := in.Claim(ctx, key, s.d)
						require.NoError(t, err)
						assert.Equal(t, s.want, got, "step %d", i)
					case "complete":
						require.NoError(t, in.Complete(ctx, key, s.d))
					case "release":
						require.NoError(t, in.Release(ctx, key))
					case "sleep":
						time.Sleep(s.d)
					}
				}
			})
		}
	})
}

func TestInboxRejectsBadInput(t *testing.T) {
	db := openSQLite(t)
	in := newInbox(t, db, outbox.SQLite)
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{name: "claim with an empty key", call: func() error { _, err := in.Claim(t.Context(), "", time.Second); return err }, want: "empty key"},
		{name: "claim with no lease", call: func() error { _, err := in.Claim(t.Context(), "k", 0); return err }, want: "lease 0s"},
		{name: "complete with an empty key", call: func() error { return in.Complete(t.Context(), "", time.Second) }, want: "empty key"},
		{name: "release with an empty key", call: func() error { return in.Release(t.Context(), "") }, want: "empty key"},
		{name: "complete in a nil tx", call: func() error { return in.CompleteTx(t.Context(), nil, "k", time.Second) }, want: "nil *sql.Tx"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "outbox: inbox")
		})
	}
}

func TestInboxCompleteTxRolledBackLeavesTheClaim(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		in := newInbox(t, db, d)
		ctx := t.Context()
		res, err := in.Claim(ctx, "k", time.Minute)
		require.NoError(t, err)
		require.Equal(t, patterns.Claimed, res)
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, in.CompleteTx(ctx, tx, "k", time.Hour))
		require.NoError(t, tx.Rollback())

		res, err = in.Claim(ctx, "k", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, patterns.InProgress, res, "a rolled-back completion must not count")
		require.NoError(t, in.Release(ctx, "k"))
		res, err = in.Claim(ctx, "k", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, patterns.Claimed, res)
	})
}

func TestInboxPurgeDeletesExpiredKeys(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		in := newInbox(t, db, d)
		ctx := t.Context()
		require.NoError(t, in.Complete(ctx, "old", time.Millisecond))
		require.NoError(t, in.Complete(ctx, "kept", time.Hour))
		time.Sleep(10 * time.Millisecond)
		n, err := in.Purge(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(1), n)
		res, err := in.Claim(ctx, "kept", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, patterns.Duplicate, res)
	})
}

// TestHandlerEffectsAndCompletionInOneTransaction runs a handler that
// writes its effect and completes its claim in one transaction; a
// redelivery of the same message ID then does nothing.
func TestHandlerEffectsAndCompletionInOneTransaction(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		in := newInbox(t, db, d)
		effects := tableName(t, "effects")
		_, err := db.ExecContext(t.Context(), "CREATE TABLE "+effects+" (order_id TEXT NOT NULL)")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+effects) })
		insert := "INSERT INTO " + effects + " (order_id) VALUES ($1)"
		if d == outbox.SQLite {
			insert = "INSERT INTO " + effects + " (order_id) VALUES (?)"
		}

		settled := make(chan acemq.Settlement, 8)
		c := connect(t, acemqtest.Memory(t), acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
		var calls atomic.Int32
		handle := func(ctx context.Context, m *acemq.Message[Order]) acemq.Ack {
			calls.Add(1)
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return acemq.Retry(err)
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, insert, m.Payload.ID); err != nil {
				return acemq.Retry(err)
			}
			if err := in.CompleteTx(ctx, tx, m.Envelope.ID, time.Hour); err != nil {
				return acemq.Retry(err)
			}
			return acemq.AckOf(tx.Commit())
		}
		cons, err := acemq.NewConsumer(c, "orders", patterns.Chain(handle, patterns.WithIdempotency[Order](in)))
		require.NoError(t, err)
		runUntilCleanup(t, cons.Run)

		pub := acemq.NewPublisher[Order](c, "", "orders")
		for range 2 { // the same message ID twice: a redelivery
			require.NoError(t, pub.Send(t.Context(), Order{ID: "o-1"}, acemq.MessageID("msg-1")))
		}
		for range 2 {
			select {
			case s := <-settled:
				assert.Equal(t, acemq.OutcomeAcked, s.Outcome)
			case <-time.After(5 * time.Second):
				t.Fatal("a delivery did not settle")
			}
		}
		assert.Equal(t, int32(1), calls.Load(), "the handler ran for the duplicate")
		var n int
		require.NoError(t, db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+effects).Scan(&n))
		assert.Equal(t, 1, n)
	})
}

func TestInboxClaimTx(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		ctx := t.Context()
		in := newInbox(t, db, d)
		claimTx := func(key string, keep time.Duration, commit bool) patterns.ClaimResult {
			t.Helper()
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			got, err := in.ClaimTx(ctx, tx, key, keep)
			require.NoError(t, err)
			if commit {
				require.NoError(t, tx.Commit())
			} else {
				require.NoError(t, tx.Rollback())
			}
			return got
		}
		// A rolled-back claim leaves nothing: the key is free at once.
		assert.Equal(t, patterns.Claimed, claimTx("k1", time.Minute, false))
		assert.Equal(t, patterns.Claimed, claimTx("k1", time.Minute, true))
		// Committed, it is completed: a duplicate for ClaimTx and Claim.
		assert.Equal(t, patterns.Duplicate, claimTx("k1", time.Minute, true))
		got, err := in.Claim(ctx, "k1", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, patterns.Duplicate, got)
		// A key a Claim holds is in progress.
		got, err = in.Claim(ctx, "k2", time.Minute)
		require.NoError(t, err)
		require.Equal(t, patterns.Claimed, got)
		assert.Equal(t, patterns.InProgress, claimTx("k2", time.Minute, false))
		// A completion whose keep ended is taken over.
		assert.Equal(t, patterns.Claimed, claimTx("k3", 0, true))
		assert.Equal(t, patterns.Claimed, claimTx("k3", time.Minute, true))
		assert.Equal(t, patterns.Duplicate, claimTx("k3", time.Minute, true))

		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		_, err = in.ClaimTx(ctx, tx, "", time.Minute)
		assert.ErrorContains(t, err, "outbox: inbox ClaimTx was given an empty key")
		_, err = in.ClaimTx(ctx, nil, "k4", time.Minute)
		assert.ErrorContains(t, err, "nil *sql.Tx")
	})
}

func TestInboxClaimTxWaitsForTheOtherTransaction(t *testing.T) {
	db := openPostgres(t)
	ctx := t.Context()
	in := newInbox(t, db, outbox.Postgres)
	for _, commit := range []bool{true, false} {
		key := "k-" + map[bool]string{true: "commit", false: "rollback"}[commit]
		first, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		got, err := in.ClaimTx(ctx, first, key, time.Minute)
		require.NoError(t, err)
		require.Equal(t, patterns.Claimed, got)
		second := make(chan patterns.ClaimResult, 1)
		var ended atomic.Bool
		go func() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Error(err)
				second <- 0
				return
			}
			defer func() { _ = tx.Rollback() }()
			got, err := in.ClaimTx(ctx, tx, key, time.Minute)
			if err != nil {
				t.Error(err)
			}
			if !ended.Load() {
				t.Error("the second ClaimTx returned before the first transaction ended")
			}
			second <- got
		}()
		time.Sleep(100 * time.Millisecond)
		ended.Store(true)
		if commit {
			require.NoError(t, first.Commit())
			assert.Equal(t, patterns.Duplicate, <-second, "after the first committed")
		} else {
			require.NoError(t, first.Rollback())
			assert.Equal(t, patterns.Claimed, <-second, "after the first rolled back")
		}
	}
}

package acemq_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
)

// The fencing recipe of docs/ordering.md ("Your own table"), as the page
// shows it: the page's blocks are cut from here (internal/repotest checks
// them).

const createAccounts = `CREATE TABLE accounts (
	id      TEXT PRIMARY KEY,
	balance BIGINT NOT NULL,
	fence   BIGINT NOT NULL DEFAULT 0 -- the highest token that wrote the row
)`

// saveAccount writes a row unless a holder with a higher token wrote it
// first. Token 0 (a plain consumer, or a transport without a Fencer)
// writes without the check and leaves the row's token as it is.
const saveAccount = `INSERT INTO accounts (id, balance, fence) VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE
SET balance = EXCLUDED.balance, fence = GREATEST(accounts.fence, EXCLUDED.fence)
WHERE EXCLUDED.fence = 0 OR accounts.fence <= EXCLUDED.fence`

// save is the handler's write: nothing affected means a holder with a
// higher token wrote the row, so this instance lost the partition.
func save(ctx context.Context, db *sql.DB, m *acemq.Message[Step]) acemq.Ack {
	res, err := db.ExecContext(ctx, saveAccount, m.Payload.Key, m.Payload.N, int64(m.Fence()))
	if err != nil {
		return acemq.AckOf(err)
	}
	n, err := res.RowsAffected()
	switch {
	case err != nil:
		return acemq.AckOf(err)
	case n == 0:
		return acemq.Retry(fmt.Errorf("account %s: %w", m.Payload.Key, acemq.ErrPartitionLost))
	}
	return acemq.Done()
}

// recipeDB opens PostgreSQL in a schema of the test's own, with the
// recipe's table, and drops the schema when the test ends.
func recipeDB(t *testing.T) *sql.DB {
	t.Helper()
	schema := strings.ToLower(strings.NewReplacer("/", "_", "-", "_", ".", "_").Replace(acemqtest.QueueName(t, "fence")))
	admin, err := sql.Open("pgx", acemqtest.Postgres(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	_, err = admin.ExecContext(ctxT(t), `CREATE SCHEMA "`+schema+`"`)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP SCHEMA "`+schema+`" CASCADE`); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(acemqtest.Postgres(t))
	require.NoError(t, err)
	qs := u.Query()
	qs.Set("search_path", schema)
	u.RawQuery = qs.Encode()
	db, err := sql.Open("pgx", u.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.ExecContext(ctxT(t), createAccounts)
	require.NoError(t, err)
	return db
}

func balanceOf(t *testing.T, db *sql.DB, id string) (balance, fence int64) {
	t.Helper()
	err := db.QueryRowContext(ctxT(t), `SELECT balance, fence FROM accounts WHERE id = $1`, id).Scan(&balance, &fence)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, -1
	}
	require.NoError(t, err)
	return balance, fence
}

// TestFencingRecipe runs docs/ordering.md's recipe as it is written, with
// an ordered consumer whose key k is blocked by its message 10 and then
// released with a re-run (issue 37 item 1: the released messages carried
// token 0, the row the partition's token, and the recipe refused them in
// a loop), and with a plain consumer's token 0 on the same row: every
// write lands, the key is released, the row ends with k's last number and
// the ordered holder's token, and no handler ran more than twice.
func TestFencingRecipe(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		db := recipeDB(t)
		q := orderedQueue(t, url, 1, "k")
		c := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		var failing atomic.Bool
		failing.Store(true)
		var runs, refused atomic.Int64
		blockKey(t, url, c, q, 30, func(ctx context.Context, m *acemq.Message[Step]) acemq.Ack {
			runs.Add(1)
			if m.Payload.N == 10 && failing.Load() {
				return acemq.Reject(errors.New("customer 42 does not exist"))
			}
			ack := save(ctx, db, m)
			if errors.Is(ack.Err(), acemq.ErrPartitionLost) {
				refused.Add(1)
			}
			return ack
		})
		balance, fence := balanceOf(t, db, "k")
		require.Equal(t, int64(9), balance, "nothing after 10 ran while k is blocked")
		require.NotZero(t, fence)

		failing.Store(false)
		require.NoError(t, acemq.ReleaseKey(ctxT(t), c, q, "k", acemq.RerunFailed()))
		within(t, 30*time.Second, "k released and its last number written", func() bool {
			keys, err := acemq.BlockedKeys(ctxT(t), c, q)
			require.NoError(t, err)
			b, _ := balanceOf(t, db, "k")
			return len(keys) == 0 && b == 30
		})
		_, after := balanceOf(t, db, "k")
		require.Equal(t, fence, after, "the released messages wrote with the holder's token")
		require.Zero(t, refused.Load(), "no released message was refused")
		require.LessOrEqual(t, runs.Load(), int64(31+3), "each message ran once (10 twice), give or take a redelivery")

		// Token 0: a plain consumer writes the same row without the check,
		// and leaves its token as it was.
		plain := consumerQueue(t, url, inPlace) // the Conn's policy: its tier is declared for this queue too
		done := make(chan acemq.Ack, 1)
		var token atomic.Uint64
		cons, err := acemq.NewConsumer(c, plain, func(ctx context.Context, m *acemq.Message[Step]) acemq.Ack {
			token.Store(m.Fence())
			ack := save(ctx, db, m)
			done <- ack
			return ack
		})
		require.NoError(t, err)
		run(t, cons)
		m := keyed(t, plain, Step{Key: "k", N: 100})
		m.Exchange, m.RoutingKey = "", plain
		publishAll(t, c, []transport.Message{m})
		select {
		case ack := <-done:
			require.NoError(t, ack.Err())
			require.Zero(t, token.Load(), "a plain consumer's token")
		case <-time.After(10 * time.Second):
			t.Fatal("the plain consumer did not run")
		}
		balance, fence0 := balanceOf(t, db, "k")
		require.Equal(t, int64(100), balance)
		require.Equal(t, fence, fence0, "token 0 leaves the row's token")
	})
}

package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fill writes n orders through p in transactions of 500.
func fill(t testing.TB, db *sql.DB, p *outbox.Publisher[Order], n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 500 {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		for j := i; j < min(n, i+500); j++ {
			require.NoError(t, p.Send(ctx, tx, Order{ID: fmt.Sprint(j), Cents: int64(j)}))
		}
		require.NoError(t, tx.Commit())
	}
}

func TestSeveralRelaysOnPostgresSendEachRowOnce(t *testing.T) {
	tests := []struct {
		name           string
		relays, rows   int
		batch, window  int
		brokerURL      func(t *testing.T) string
		deliveryWithin time.Duration
	}{
		{name: "memory broker", relays: 3, rows: 2000, batch: 100, window: 64, brokerURL: func(t *testing.T) string { return acemqtest.Memory(t) }, deliveryWithin: 20 * time.Second},
		{name: "rabbitmq", relays: 3, rows: 2000, batch: 100, window: 64, brokerURL: func(t *testing.T) string { return acemqtest.RabbitMQ(t) }, deliveryWithin: 60 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := openPostgres(t)
			url := tc.brokerURL(t)
			o := newOutbox(t, db, outbox.Postgres)
			c := connect(t, url)
			queue := acemqtest.QueueName(t, "outbox")
			acemqtest.DeleteQueuesAfter(t, url, queue, queue+".retry.1s", queue+".retry.5s", queue+".retry.30s", queue+".retry.2m0s")
			col := collect(t, c, queue)
			fill(t, db, outbox.NewPublisher[Order](o, c, "", queue), tc.rows)
			want := storedIDs(t, db, o)
			require.Len(t, want, tc.rows)

			start := time.Now()
			for range tc.relays {
				relayConn := connect(t, url) // a process of its own, as far as the broker can tell
				runUntilCleanup(t, outbox.NewRelay(o, relayConn, outbox.BatchSize(tc.batch), outbox.Window(tc.window),
					outbox.PollInterval(fastPoll), outbox.WithLogger(quiet)).Run)
			}
			col.waitUnique(t, tc.rows, tc.deliveryWithin)
			elapsed := time.Since(start)
			require.Eventually(t, func() bool { n, err := o.Pending(t.Context()); return err == nil && n == 0 },
				5*time.Second, 10*time.Millisecond, "relayed rows left in the table")
			time.Sleep(200 * time.Millisecond) // room for a late duplicate
			unique, dups := col.unique()
			t.Logf("%d relays, %d rows: %d distinct delivered, %d duplicates, %.0f rows/s",
				tc.relays, tc.rows, unique, dups, float64(tc.rows)/elapsed.Seconds())
			assert.Equal(t, tc.rows, unique)
			assert.Zero(t, dups, "a row was sent twice by relays that never died")
			got := map[string]bool{}
			for _, r := range col.all() {
				got[r.env.ID] = true
			}
			for _, id := range want {
				require.True(t, got[id], "message %s was never delivered", id)
			}
		})
	}
}

func TestConcurrentClaimsOfOneKeyGiveOneClaimed(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		in := newInbox(t, db, d)
		const claimers = 12
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			results = map[string]int{}
		)
		for range claimers {
			wg.Go(func() {
				res, err := in.Claim(context.Background(), "order-1", time.Minute)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					results["error: "+err.Error()]++
					return
				}
				results[res.String()]++
			})
		}
		wg.Wait()
		assert.Equal(t, map[string]int{"claimed": 1, "in progress": claimers - 1}, results)
	})
}

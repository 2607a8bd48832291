package outbox_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/transport/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openPostgresAs opens PostgreSQL with the given application_name, so a
// test can find its own backends, and only them, in pg_stat_activity.
func openPostgresAs(t *testing.T, app string) *sql.DB {
	t.Helper()
	url := acemqtest.Postgres(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	db, err := sql.Open("pgx", url+sep+"application_name="+app)
	require.NoError(t, err)
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(t.Context()))
	return db
}

func TestSettleStatementsSurviveALostPostgresConnection(t *testing.T) {
	for _, what := range []string{"delete", "push back", "release"} {
		t.Run(what, func(t *testing.T) {
			admin := openPostgres(t)
			app := tableName(t, "acemq_settle")
			db := openPostgresAs(t, app)
			o := newOutbox(t, db, outbox.Postgres)
			url := acemqtest.Memory(t)
			c := connect(t, url)
			col := collect(t, c, "orders")
			// For the release, publishes that never confirm, so the relay
			// stops with its batch in hand and hands the rows back.
			g := &gate{Transport: memory.New(strings.TrimPrefix(url, "memory://"))}
			relayConn := c
			if what == "release" {
				relayConn = connect(t, "", acemq.WithTransport(g))
			}
			key := "orders"
			if what == "push back" {
				key = "nowhere"
			}
			write(t, db, outbox.NewPublisher[Order](o, c, "", key), nil, Order{ID: "a"})

			var (
				mu     sync.Mutex
				tries  int
				killed int
				killer sync.WaitGroup
			)
			defer killer.Wait()
			// A long lease: falling back to it would take far longer than
			// the test waits.
			r := outbox.NewRelay(o, relayConn, outbox.PollInterval(fastPoll), outbox.Lease(time.Minute), outbox.Backoff(time.Hour, time.Hour),
				outbox.StopTimeout(0), outbox.WithLogger(quiet))
			outbox.SetSettleHookForTest(r, func(w string) {
				mu.Lock()
				defer mu.Unlock()
				if w != what {
					return
				}
				tries++
				if tries > 1 {
					return
				}
				// The first try will wait for the rows' locks, held here;
				// while it waits, its backend is killed, then the locks go.
				lock, err := admin.BeginTx(context.Background(), nil)
				require.NoError(t, err)
				_, err = lock.ExecContext(context.Background(), "SELECT id FROM "+o.TableName()+" FOR UPDATE")
				require.NoError(t, err)
				killer.Go(func() {
					defer func() { _ = lock.Rollback() }()
					var pid int
					require.Eventually(t, func() bool {
						err := admin.QueryRowContext(context.Background(), `SELECT pid FROM pg_stat_activity
	WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&pid)
						return err == nil
					}, 5*time.Second, time.Millisecond, "the %s never waited for the lock", what)
					var ok bool
					require.NoError(t, admin.QueryRowContext(context.Background(), "SELECT pg_terminate_backend($1)", pid).Scan(&ok))
					mu.Lock()
					defer mu.Unlock()
					if ok {
						killed++
					}
				})
			})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			var settled func() bool
			switch what {
			case "delete":
				col.waitUnique(t, 1, 5*time.Second)
				settled = func() bool { n, err := o.Pending(t.Context()); return err == nil && n == 0 }
			case "push back":
				settled = func() bool {
					var n int
					err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+o.TableName()+" WHERE attempts = 1 AND locked_until IS NULL").Scan(&n)
					return err == nil && n == 1
				}
			case "release":
				// Stop the relay while its batch is in hand: it hands the
				// rows back.
				require.Eventually(t, func() bool { return g.entered.Load() == 1 }, 5*time.Second, time.Millisecond)
				cancel()
				settled = func() bool { return leasedOrFail(t, db, o) == 0 }
			}
			require.Eventually(t, settled, 5*time.Second, 10*time.Millisecond, "the %s fell back to the lease", what)
			cancel()
			require.NoError(t, <-done)
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, 1, killed, "the backend of the first try was not killed")
			assert.GreaterOrEqual(t, tries, 2, "the %s was not tried again", what)
			_, dups := col.unique()
			assert.Zero(t, dups)
			t.Logf("%s: %d tries, %d backends killed, %d duplicates", what, tries, killed, dups)
		})
	}
}

// leasedOrFail is leased for use inside require.Eventually.
func leasedOrFail(t *testing.T, db *sql.DB, o *outbox.Outbox) int {
	var n int
	if err := db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+o.TableName()+" WHERE locked_until IS NOT NULL").Scan(&n); err != nil {
		return -1
	}
	return n
}

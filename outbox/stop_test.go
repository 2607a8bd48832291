package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowConfirm is a transport whose publishes reach the broker at once but
// whose confirms come only after delay, as a busy broker's would.
type slowConfirm struct {
	transport.Transport
	delay   time.Duration
	entered atomic.Int64
}

func (s *slowConfirm) Publish(ctx context.Context, m transport.Message) error {
	s.entered.Add(1)
	if err := s.Transport.Publish(ctx, m); err != nil {
		return err
	}
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// leased counts the rows of o that hold a lease.
func leased(t *testing.T, db *sql.DB, o *outbox.Outbox) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(),
		"SELECT COUNT(*) FROM "+o.TableName()+" WHERE locked_until IS NOT NULL").Scan(&n))
	return n
}

func TestRelayStoppingWaitsForTheConfirmsInFlight(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		const rows = 30
		o := newOutbox(t, db, d)
		url := acemqtest.Memory(t)
		c := connect(t, url)
		col := collect(t, c, "orders")
		orders := make([]Order, rows)
		for i := range orders {
			orders[i] = Order{ID: fmt.Sprint(i)}
		}
		write(t, db, outbox.NewPublisher[Order](o, c, "", "orders"), nil, orders...)

		slow := &slowConfirm{Transport: memory.New(strings.TrimPrefix(url, "memory://")), delay: 300 * time.Millisecond}
		sc := connect(t, "", acemq.WithTransport(slow))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- outbox.NewRelay(o, sc, outbox.BatchSize(rows), outbox.Window(rows), outbox.WithLogger(quiet)).Run(ctx)
		}()
		col.waitUnique(t, rows, 5*time.Second) // all delivered, none confirmed yet
		require.Equal(t, int64(rows), slow.entered.Load())
		cancel()
		require.NoError(t, <-done)

		assert.Empty(t, storedIDs(t, db, o), "confirmed rows were handed back instead of deleted")
		runUntilCleanup(t, outbox.NewRelay(o, c, outbox.PollInterval(fastPoll), outbox.WithLogger(quiet)).Run)
		time.Sleep(200 * time.Millisecond) // room for a re-send
		_, dups := col.unique()
		t.Logf("%s: %d duplicates after a graceful stop with %d confirms in flight", d, dups, rows)
		assert.Zero(t, dups)
	})
}

func TestRelayStoppedAtRandomMomentsNeverStrandsRows(t *testing.T) {
	const rows, stops = 4000, 30
	db := openPostgres(t)
	url := acemqtest.RabbitMQ(t)
	o := newOutbox(t, db, outbox.Postgres)
	c := connect(t, url)
	queue := acemqtest.QueueName(t, "outbox-stop")
	acemqtest.DeleteQueuesAfter(t, url, queue)
	col := collect(t, c, queue)
	fill(t, db, outbox.NewPublisher[Order](o, c, "", queue), rows)
	want := storedIDs(t, db, o)

	relayConn := connect(t, url)
	rng := rand.New(rand.NewPCG(1, 2))
	stopped := 0
	for range stops {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- outbox.NewRelay(o, relayConn, outbox.BatchSize(256), outbox.Window(256), outbox.PollInterval(fastPoll),
				outbox.WithLogger(quiet)).Run(ctx)
		}()
		time.Sleep(time.Duration(rng.IntN(30_000)) * time.Microsecond)
		cancel()
		require.NoError(t, <-done)
		stopped++
		require.Zero(t, leased(t, db, o), "stop %d left rows leased", stopped)
		if n, err := o.Pending(t.Context()); err == nil && n == 0 {
			break
		}
	}
	runUntilCleanup(t, outbox.NewRelay(o, relayConn, outbox.PollInterval(fastPoll), outbox.WithLogger(quiet)).Run)
	col.waitUnique(t, rows, 60*time.Second)
	time.Sleep(300 * time.Millisecond) // room for a late duplicate
	got := map[string]bool{}
	for _, r := range col.all() {
		got[r.env.ID] = true
	}
	for _, id := range want {
		require.True(t, got[id], "message %s was lost", id)
	}
	_, dups := col.unique()
	t.Logf("%d rows, %d stops at random moments: %d duplicates, no row ever left leased", rows, stopped, dups)
	assert.Zero(t, dups)
}

func TestRelayStoppedDuringItsClaimHandsTheRowsBack(t *testing.T) {
	admin := openPostgres(t)
	app := tableName(t, "acemq_claim")
	db := openPostgresAs(t, app)
	o := newOutbox(t, db, outbox.Postgres)
	url := acemqtest.Memory(t)
	c := connect(t, url)
	write(t, db, outbox.NewPublisher[Order](o, c, "", "orders"), nil, Order{ID: "a"}, Order{ID: "b"}, Order{ID: "c"})
	g := &gate{Transport: memory.New(strings.TrimPrefix(url, "memory://"))}
	gated := connect(t, "", acemq.WithTransport(g))

	// Hold the claim's UPDATE at the table's lock, stop the relay there,
	// then let the UPDATE through.
	lock, err := admin.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback() }()
	_, err = lock.ExecContext(t.Context(), "LOCK TABLE "+o.TableName()+" IN SHARE MODE")
	require.NoError(t, err)

	var released atomic.Int64
	r := outbox.NewRelay(o, gated, outbox.Lease(time.Minute), outbox.WithLogger(quiet))
	outbox.SetSettleHookForTest(r, func(what string) {
		if what == "release" {
			released.Add(1)
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM pg_stat_activity
	WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n)
		return err == nil && n == 1
	}, 5*time.Second, time.Millisecond, "the claim never waited for the lock")
	cancel()
	time.Sleep(100 * time.Millisecond) // a claim on ctx would be cancelled by now
	require.NoError(t, lock.Commit())
	require.NoError(t, <-done)

	assert.Equal(t, int64(1), released.Load(), "the claim's rows were not handed back")
	assert.Zero(t, leased(t, db, o), "the stop left rows leased")
	assert.Zero(t, g.entered.Load(), "a stopped relay published")
	assert.Len(t, storedIDs(t, db, o), 3)
}

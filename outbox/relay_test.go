package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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

const fastPoll = 10 * time.Millisecond

func TestRelayPublishesScheduledRowsWhenDueNeverEarly(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		o := newOutbox(t, db, d)
		c := connect(t, acemqtest.Memory(t))
		col := collect(t, c, "orders")
		p := outbox.NewPublisher[Order](o, c, "", "orders")
		runUntilCleanup(t, outbox.NewRelay(o, c, outbox.PollInterval(fastPoll), outbox.WithLogger(quiet)).Run)

		written := time.Now()
		tests := []struct {
			name  string
			opt   acemq.SendOption
			delay time.Duration
		}{
			{name: "now", delay: 0},
			{name: "after 300ms", opt: outbox.After(300 * time.Millisecond), delay: 300 * time.Millisecond},
			{name: "at in 600ms", opt: outbox.At(written.Add(600 * time.Millisecond)), delay: 600 * time.Millisecond},
			{name: "at in the past", opt: outbox.At(written.Add(-time.Hour)), delay: 0},
			{name: "negative after", opt: outbox.After(-time.Second), delay: 0},
		}
		for _, tc := range tests {
			var opts []acemq.SendOption
			if tc.opt != nil {
				opts = append(opts, tc.opt)
			}
			write(t, db, p, opts, Order{ID: tc.name})
		}
		col.waitUnique(t, len(tests), 5*time.Second)
		got := col.all()
		require.Len(t, got, len(tests))
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r, ok := col.byOrder(tc.name)
				require.True(t, ok, "not delivered")
				early := written.Add(tc.delay)
				assert.False(t, r.at.Before(early), "delivered %v before it was due", early.Sub(r.at))
				assert.Less(t, r.at.Sub(early), time.Second, "delivered much later than due")
			})
		}
	})
}

func TestRelayBacksOffAFailingRowWithoutBlockingTheOthers(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		o := newOutbox(t, db, d)
		c := connect(t, acemqtest.Memory(t))
		col := collect(t, c, "orders")
		nowhere := outbox.NewPublisher[Order](o, c, "", "no-such-queue")
		orders := outbox.NewPublisher[Order](o, c, "", "orders")
		write(t, db, nowhere, nil, Order{ID: "lost"}) // the lowest id: first in every batch
		for i := range 20 {
			write(t, db, orders, nil, Order{ID: fmt.Sprint(i)})
		}
		start := time.Now()
		runUntilCleanup(t, outbox.NewRelay(o, c, outbox.PollInterval(fastPoll), outbox.BatchSize(8),
			outbox.Backoff(150*time.Millisecond, time.Second), outbox.WithLogger(quiet)).Run)
		col.waitUnique(t, 20, 5*time.Second)
		assert.Less(t, time.Since(start), time.Second, "the failing row held the others up")

		time.Sleep(time.Second - time.Since(start))
		var (
			attempts  int
			lastError string
			locked    sql.NullString
		)
		q := "SELECT attempts, last_error, CAST(locked_until AS TEXT) FROM " + o.TableName()
		require.NoError(t, db.QueryRowContext(t.Context(), q).Scan(&attempts, &lastError, &locked))
		// 150ms, 300ms, 600ms: four tries fit in a second, a hot loop many more.
		assert.GreaterOrEqual(t, attempts, 2, "the failing row was not retried")
		assert.LessOrEqual(t, attempts, 5, "the failing row was retried in a hot loop")
		assert.Contains(t, lastError, "no-such-queue")
		_, dups := col.unique()
		assert.Zero(t, dups)
	})
}

// gate is a transport whose publishes after the first open ones block
// until their ctx ends, as a broker that stopped confirming would.
type gate struct {
	transport.Transport
	open    int64
	entered atomic.Int64
}

func (g *gate) Publish(ctx context.Context, m transport.Message) error {
	if g.entered.Add(1) > g.open {
		<-ctx.Done()
		return ctx.Err()
	}
	return g.Transport.Publish(ctx, m)
}

func TestRelayCancelledMidBatchLosesNothing(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		const rows, confirmed = 50, 20
		const stopTimeout = 200 * time.Millisecond
		o := newOutbox(t, db, d)
		url := acemqtest.Memory(t)
		c := connect(t, url)
		col := collect(t, c, "orders")
		p := outbox.NewPublisher[Order](o, c, "", "orders")
		orders := make([]Order, rows)
		for i := range orders {
			orders[i] = Order{ID: fmt.Sprint(i)}
		}
		write(t, db, p, nil, orders...)
		want := storedIDs(t, db, o)

		g := &gate{Transport: memory.New(strings.TrimPrefix(url, "memory://")), open: confirmed}
		gated := connect(t, "", acemq.WithTransport(g))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- outbox.NewRelay(o, gated, outbox.BatchSize(rows), outbox.Window(rows), outbox.StopTimeout(stopTimeout),
				outbox.WithLogger(quiet)).Run(ctx)
		}()
		col.waitUnique(t, confirmed, 5*time.Second)
		require.Eventually(t, func() bool { return g.entered.Load() == rows }, 5*time.Second, time.Millisecond)
		cancel()
		stopping := time.Now()
		require.NoError(t, <-done)
		took := time.Since(stopping)
		assert.GreaterOrEqual(t, took, stopTimeout, "the relay did not wait for the confirms outstanding")
		assert.Less(t, took, stopTimeout+2*time.Second, "the relay waited past StopTimeout")

		sent := map[string]bool{}
		for _, r := range col.all() {
			sent[r.env.ID] = true
		}
		require.Len(t, sent, confirmed)
		var unsent []string
		for _, id := range want {
			if !sent[id] {
				unsent = append(unsent, id)
			}
		}
		assert.Equal(t, unsent, storedIDs(t, db, o), "the confirmed rows must be gone and the rest kept")
		var locked, tried int
		require.NoError(t, db.QueryRowContext(t.Context(),
			"SELECT COUNT(locked_until), COALESCE(SUM(attempts), 0) FROM "+o.TableName()).Scan(&locked, &tried))
		assert.Zero(t, locked, "unsent rows must be handed back at once")
		assert.Zero(t, tried, "a stopped relay is not a failed publish")

		runUntilCleanup(t, outbox.NewRelay(o, c, outbox.PollInterval(fastPoll), outbox.WithLogger(quiet)).Run)
		col.waitUnique(t, rows, 5*time.Second)
		got := map[string]bool{}
		for _, r := range col.all() {
			got[r.env.ID] = true
		}
		for _, id := range want {
			assert.True(t, got[id], "message %s was lost", id)
		}
		_, dups := col.unique()
		t.Logf("%s: %d duplicates after a cancelled relay (0 expected when it stops cleanly)", d, dups)
		assert.Zero(t, dups)
	})
}

func TestRelayKilledAfterItsClaimLosesNothing(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		const lease = 400 * time.Millisecond
		o := newOutbox(t, db, d)
		c := connect(t, acemqtest.Memory(t))
		col := collect(t, c, "orders")
		p := outbox.NewPublisher[Order](o, c, "", "orders")
		write(t, db, p, nil, Order{ID: "a"}, Order{ID: "b"}, Order{ID: "c"})
		want := storedIDs(t, db, o)

		dead := outbox.NewRelay(o, c, outbox.Lease(lease))
		// Taken before the claim: the lease runs from the database's clock
		// at the claim, which is no earlier than this.
		claimed := time.Now()
		n, err := outbox.ClaimForTest(t.Context(), dead)
		require.NoError(t, err)
		require.Equal(t, 3, n)

		runUntilCleanup(t, outbox.NewRelay(o, c, outbox.PollInterval(fastPoll), outbox.WithLogger(quiet)).Run)
		col.waitUnique(t, 3, 5*time.Second)
		for _, r := range col.all() {
			// The margin is the databases' clock resolution, not a speed.
			assert.GreaterOrEqual(t, r.at.Sub(claimed), lease-5*time.Millisecond, "a leased row was taken before its lease ended")
			assert.Contains(t, want, r.env.ID)
		}
	})
}

func TestRelayStopsWhenTheConnIsClosed(t *testing.T) {
	db := openSQLite(t)
	o := newOutbox(t, db, outbox.SQLite)
	c := connect(t, acemqtest.Memory(t))
	require.NoError(t, c.Declare(t.Context(), acemq.Queue{Name: "orders"}))
	write(t, db, outbox.NewPublisher[Order](o, c, "", "orders"), nil, Order{ID: "a"})
	require.NoError(t, c.Close())

	err := outbox.NewRelay(o, c, outbox.WithLogger(quiet)).Run(t.Context())
	require.ErrorIs(t, err, acemq.ErrClosed)
	assert.True(t, strings.HasPrefix(err.Error(), "outbox: relay of table "+o.TableName()+" stopped: "), err.Error())
	assert.Len(t, storedIDs(t, db, o), 1, "the unsent row must stay")
}

func TestRelayRejectsBadOptions(t *testing.T) {
	db := openSQLite(t)
	o := newOutbox(t, db, outbox.SQLite)
	c := connect(t, acemqtest.Memory(t))
	tests := []struct {
		name string
		o    *outbox.Outbox
		c    *acemq.Conn
		opt  outbox.RelayOption
		want string
	}{
		{name: "batch 0", o: o, c: c, opt: outbox.BatchSize(0), want: "BatchSize(0)"},
		{name: "batch too big", o: o, c: c, opt: outbox.BatchSize(10_001), want: "BatchSize(10001)"},
		{name: "window 0", o: o, c: c, opt: outbox.Window(0), want: "Window(0)"},
		{name: "poll 0", o: o, c: c, opt: outbox.PollInterval(0), want: "PollInterval(0s)"},
		{name: "short lease", o: o, c: c, opt: outbox.Lease(time.Millisecond), want: "Lease(1ms)"},
		{name: "backoff min 0", o: o, c: c, opt: outbox.Backoff(0, time.Second), want: "Backoff(0s, 1s)"},
		{name: "backoff max below min", o: o, c: c, opt: outbox.Backoff(2*time.Second, time.Second), want: "minimum <= maximum"},
		{name: "nil logger", o: o, c: c, opt: outbox.WithLogger(nil), want: "WithLogger"},
		{name: "max attempts 0", o: o, c: c, opt: outbox.MaxAttempts(0), want: "MaxAttempts(0)"},
		{name: "negative stop timeout", o: o, c: c, opt: outbox.StopTimeout(-time.Second), want: "StopTimeout(-1s)"},
		{name: "nil option", o: o, c: c, opt: nil, want: "nil option"},
		{name: "nil outbox", c: c, opt: outbox.BatchSize(1), want: "nil Outbox"},
		{name: "nil conn", o: o, opt: outbox.BatchSize(1), want: "nil Conn"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := outbox.NewRelay(tc.o, tc.c, tc.opt).Run(t.Context())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "outbox: "), err.Error())
			assert.False(t, errors.Is(err, context.Canceled))
		})
	}
}

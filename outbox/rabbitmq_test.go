package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRestartingOneOfThreeRelaysUnderLoadSendsNoDuplicates(t *testing.T) {
	const rows = 6000
	db := openPostgres(t)
	url := acemqtest.RabbitMQ(t)
	o := newOutbox(t, db, outbox.Postgres)
	c := connect(t, url)
	queue := acemqtest.QueueName(t, "outbox-restart")
	acemqtest.DeleteQueuesAfter(t, url, queue)
	col := collect(t, c, queue)
	fill(t, db, outbox.NewPublisher[Order](o, c, "", queue), rows)

	opts := []outbox.RelayOption{outbox.BatchSize(256), outbox.Window(256), outbox.PollInterval(fastPoll), outbox.WithLogger(quiet)}
	for range 2 {
		runUntilCleanup(t, outbox.NewRelay(o, connect(t, url), opts...).Run)
	}
	restarted := connect(t, url)
	stops := 0
	for {
		if n, err := o.Pending(t.Context()); err == nil && n == 0 {
			break
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- outbox.NewRelay(o, restarted, opts...).Run(ctx) }()
		time.Sleep(40 * time.Millisecond)
		cancel()
		require.NoError(t, <-done)
		stops++
		require.Less(t, stops, 2000, "the rows were never all relayed")
	}
	col.waitUnique(t, rows, 30*time.Second)
	time.Sleep(300 * time.Millisecond) // room for a late duplicate
	_, dups := col.unique()
	t.Logf("%d rows, 3 relays, one stopped and restarted %d times: %d duplicates", rows, stops, dups)
	assert.Zero(t, dups)
}

func TestAPoisonRowStopsDisturbingOthersOnceDead(t *testing.T) {
	const rows, maxAttempts = 3000, 3
	db := openPostgres(t)
	url := acemqtest.RabbitMQ(t)
	o := newOutbox(t, db, outbox.Postgres)
	c := connect(t, url)
	queue := acemqtest.QueueName(t, "outbox-poison")
	acemqtest.DeleteQueuesAfter(t, url, queue)
	col := collect(t, c, queue)
	// Every 500th row goes to an exchange that does not exist, which makes
	// RabbitMQ close the publishing channel under the rows in flight.
	good := outbox.NewPublisher[Order](o, c, "", queue)
	poison := outbox.NewPublisher[Order](o, c, "no-such-exchange-"+queue, "x")
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	poisoned := 0
	for i := range rows {
		p := good
		if i%500 == 250 {
			p, poisoned = poison, poisoned+1
		}
		require.NoError(t, p.Send(t.Context(), tx, Order{ID: fmt.Sprint(i)}))
	}
	require.NoError(t, tx.Commit())

	runUntilCleanup(t, outbox.NewRelay(o, connect(t, url), outbox.PollInterval(fastPoll), outbox.MaxAttempts(maxAttempts),
		outbox.Backoff(20*time.Millisecond, 40*time.Millisecond), outbox.WithLogger(quiet)).Run)
	col.waitUnique(t, rows-poisoned, 60*time.Second)
	require.Eventually(t, func() bool { n, err := o.Dead(t.Context()); return err == nil && n == int64(poisoned) },
		10*time.Second, 10*time.Millisecond, "the poison rows were not dead-lettered")
	_, before := col.unique()
	time.Sleep(500 * time.Millisecond) // dead, they are tried no more
	_, dups := col.unique()
	dead, err := o.DeadRows(t.Context(), 100)
	require.NoError(t, err)
	for _, d := range dead {
		assert.Equal(t, maxAttempts, d.Attempts)
	}
	t.Logf("%d rows, %d poison, MaxAttempts %d: %d duplicates of innocent rows, none after the poison died", rows, poisoned, maxAttempts, dups)
	assert.Equal(t, before, dups, "duplicates kept coming after the poison rows died")
}

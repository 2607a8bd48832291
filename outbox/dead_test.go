package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// records returns the records logged so far with their attributes by key.
func (r *recorder) records() []map[string]slog.Value {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]map[string]slog.Value, len(r.recs))
	for i, rec := range r.recs {
		m := map[string]slog.Value{"msg": slog.StringValue(rec.Message), "level": slog.StringValue(rec.Level.String())}
		rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value; return true })
		out[i] = m
	}
	return out
}

func TestRelayDeadLettersARowAfterMaxAttemptsAndReplaysIt(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		o := newOutbox(t, db, d, outbox.WithMeterProvider(mp))
		c := connect(t, acemqtest.Memory(t))
		col := collect(t, c, "orders")
		write(t, db, outbox.NewPublisher[Order](o, c, "", "later"), nil, Order{ID: "poison"})
		write(t, db, outbox.NewPublisher[Order](o, c, "", "orders"), nil, Order{ID: "a"}, Order{ID: "b"})
		poison := storedIDs(t, db, o)[0]

		const maxAttempts = 3
		relayCtx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- outbox.NewRelay(o, c, outbox.PollInterval(fastPoll), outbox.Backoff(10*time.Millisecond, 20*time.Millisecond),
				outbox.MaxAttempts(maxAttempts), outbox.WithLogger(quiet)).Run(relayCtx)
		}()
		defer func() { stop(); require.NoError(t, <-done) }()
		col.waitUnique(t, 2, 5*time.Second)
		require.Eventually(t, func() bool { n, err := o.Dead(t.Context()); return err == nil && n == 1 },
			5*time.Second, 10*time.Millisecond, "the failing row was not dead-lettered")

		dead, err := o.DeadRows(t.Context(), 10)
		require.NoError(t, err)
		require.Len(t, dead, 1)
		assert.Equal(t, poison, dead[0].MessageID)
		assert.Equal(t, "later", dead[0].RoutingKey)
		assert.Equal(t, maxAttempts, dead[0].Attempts)
		assert.Contains(t, dead[0].LastError, "later")
		assert.False(t, dead[0].Died.Before(dead[0].Created))
		pending, err := o.Pending(t.Context())
		require.NoError(t, err)
		assert.Zero(t, pending, "a dead row is not pending")

		// The gauges are counted at each collection; one that met the
		// database busy (SQLite, under the relay's writes) is missing from
		// that collection only.
		assert.EventuallyWithT(t, func(ct *assert.CollectT) {
			m, err := collected(reader, o.TableName())
			if !assert.NoError(ct, err) {
				return
			}
			assert.Equal(ct, int64(1), m[outbox.MetricDead])
			assert.Equal(ct, int64(1), m[outbox.MetricDeadLettered])
			assert.Equal(ct, int64(maxAttempts), m[outbox.MetricFailed])
		}, 5*time.Second, 20*time.Millisecond)

		// Dead, the row is left alone: no more attempts, however long.
		time.Sleep(150 * time.Millisecond)
		again, err := o.DeadRows(t.Context(), 10)
		require.NoError(t, err)
		require.Len(t, again, 1)
		assert.Equal(t, maxAttempts, again[0].Attempts, "a dead row was tried again")

		// The cause fixed, a replay sends it.
		require.NoError(t, c.Declare(t.Context(), acemq.Queue{Name: "later"}))
		later := collect(t, c, "later")
		n, err := o.Replay(t.Context(), dead[0].ID, dead[0].ID+1000)
		require.NoError(t, err)
		assert.Equal(t, int64(1), n)
		later.waitUnique(t, 1, 5*time.Second)
		require.Eventually(t, func() bool { n, err := o.Pending(t.Context()); return err == nil && n == 0 },
			5*time.Second, 10*time.Millisecond)
		n, err = o.Dead(t.Context())
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}

func TestReplayAllRevivesEveryDeadRow(t *testing.T) {
	db := openSQLite(t)
	o := newOutbox(t, db, outbox.SQLite)
	c := connect(t, acemqtest.Memory(t))
	write(t, db, outbox.NewPublisher[Order](o, c, "", "nowhere"), nil, Order{ID: "a"}, Order{ID: "b"})
	runRelayUntil(t, o, c, func() bool { n, err := o.Dead(t.Context()); return err == nil && n == 2 },
		outbox.MaxAttempts(1))
	n, err := o.ReplayAll(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(2), n)
	pending, err := o.Pending(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(2), pending)
	var attempts int
	require.NoError(t, db.QueryRowContext(t.Context(), "SELECT SUM(attempts) FROM "+o.TableName()).Scan(&attempts))
	assert.Zero(t, attempts, "a replayed row starts its attempts again")
	_, err = o.DeadRows(t.Context(), 0)
	assert.ErrorContains(t, err, "outbox: DeadRows was given limit 0")
}

// runRelayUntil runs a relay of o with fast polls and backoff until cond
// holds, then stops it.
func runRelayUntil(t *testing.T, o *outbox.Outbox, c *acemq.Conn, cond func() bool, opts ...outbox.RelayOption) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	opts = append([]outbox.RelayOption{outbox.PollInterval(fastPoll), outbox.Backoff(5*time.Millisecond, 10*time.Millisecond),
		outbox.WithLogger(quiet)}, opts...)
	go func() { done <- outbox.NewRelay(o, c, opts...).Run(ctx) }()
	require.Eventually(t, cond, 5*time.Second, 5*time.Millisecond)
	stop()
	require.NoError(t, <-done)
}

func TestRelayLogsOneLinePerFailedBatch(t *testing.T) {
	db := openSQLite(t)
	o := newOutbox(t, db, outbox.SQLite)
	c := connect(t, acemqtest.Memory(t))
	col := collect(t, c, "orders")
	nowhere := outbox.NewPublisher[Order](o, c, "", "nowhere")
	orders := outbox.NewPublisher[Order](o, c, "", "orders")
	for i := range 5 {
		write(t, db, nowhere, nil, Order{ID: fmt.Sprint("lost-", i)})
		write(t, db, orders, nil, Order{ID: fmt.Sprint(i)})
	}
	rec := &recorder{}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- outbox.NewRelay(o, c, outbox.BatchSize(10), outbox.PollInterval(time.Hour), outbox.Backoff(time.Hour, time.Hour),
			outbox.WithLogger(slog.New(rec))).Run(ctx)
	}()
	col.waitUnique(t, 5, 5*time.Second)
	require.Eventually(t, func() bool { return len(rec.records()) > 0 }, 5*time.Second, 5*time.Millisecond)
	stop()
	require.NoError(t, <-done)

	recs := rec.records()
	require.Len(t, recs, 1, "one line for the batch, not one per row: %v", recs)
	line := recs[0]
	assert.Equal(t, "WARN", line["level"].String())
	assert.Equal(t, int64(5), line["failed"].Int64())
	assert.Equal(t, int64(10), line["batch"].Int64())
	assert.Equal(t, o.TableName(), line["table"].String())
	_, hasErr := line["error"]
	assert.True(t, hasErr, "errors are logged under the key error, as everywhere in the module")
	assert.Contains(t, line["error"].String(), "nowhere")
}

// TestRelayLogsToTheConnsLogger: without WithLogger a Relay writes where the
// Conn does (acemq.WithLogger), not to slog.Default().
func TestRelayLogsToTheConnsLogger(t *testing.T) {
	db := openSQLite(t)
	o := newOutbox(t, db, outbox.SQLite)
	rec := &recorder{}
	c := connect(t, acemqtest.Memory(t), acemq.WithLogger(slog.New(rec)))
	write(t, db, outbox.NewPublisher[Order](o, c, "", "nowhere"), nil, Order{ID: "lost"})
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- outbox.NewRelay(o, c, outbox.PollInterval(time.Hour), outbox.Backoff(time.Hour, time.Hour)).Run(ctx)
	}()
	require.Eventually(t, func() bool {
		for _, r := range rec.records() {
			if _, ok := r["failed"]; ok {
				return true
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond, "the relay's failed batch is logged on the Conn's logger")
	stop()
	require.NoError(t, <-done)
}

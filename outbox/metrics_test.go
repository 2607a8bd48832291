package outbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// readings collects the outbox's instruments: counters and gauges by
// name, and the histogram's count.
func readings(t *testing.T, r *sdkmetric.ManualReader, table string) map[string]int64 {
	t.Helper()
	out, err := collected(r, table)
	require.NoError(t, err)
	return out
}

// collected is readings, returning the collection's error.
func collected(r *sdkmetric.ManualReader, table string) (map[string]int64, error) {
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	want := attribute.String("db.collection.name", table)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/acemq/acemq/outbox" {
			continue
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value(want.Key); ok && v == want.Value {
						out[m.Name] += p.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value(want.Key); ok && v == want.Value {
						out[m.Name] = p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value(want.Key); ok && v == want.Value {
						out[m.Name] += int64(p.Count)
					}
				}
			}
		}
	}
	return out, nil
}

func TestMetricsCountPendingRelayedFailedAndLag(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		o := newOutbox(t, db, d, outbox.WithMeterProvider(mp))
		c := connect(t, acemqtest.Memory(t))
		col := collect(t, c, "orders")
		write(t, db, outbox.NewPublisher[Order](o, c, "", "nowhere"), nil, Order{ID: "lost"})
		write(t, db, outbox.NewPublisher[Order](o, c, "", "orders"), nil, Order{ID: "a"}, Order{ID: "b"}, Order{ID: "c"})

		before := readings(t, reader, o.TableName())
		assert.Equal(t, int64(4), before[outbox.MetricPending])
		assert.Zero(t, before[outbox.MetricRelayed])

		runUntilCleanup(t, outbox.NewRelay(o, c, outbox.PollInterval(fastPoll), outbox.Backoff(time.Hour, time.Hour),
			outbox.WithLogger(quiet)).Run)
		col.waitUnique(t, 3, 5*time.Second)
		// The relayed counter moves just after the rows are deleted: wait for both.
		require.Eventually(t, func() bool {
			r := readings(t, reader, o.TableName())
			return r[outbox.MetricPending] == 1 && r[outbox.MetricRelayed] == 3
		}, 5*time.Second, 10*time.Millisecond)
		after := readings(t, reader, o.TableName())
		assert.Equal(t, int64(3), after[outbox.MetricRelayed])
		assert.Equal(t, int64(1), after[outbox.MetricFailed], "one failure, then an hour's backoff")
		assert.Equal(t, int64(3), after[outbox.MetricLag], "one lag per relayed row")
	})
}

func TestCloseStopsThePendingGauge(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	o := newOutbox(t, openSQLite(t), outbox.SQLite, outbox.WithMeterProvider(mp))
	_, seen := readings(t, reader, o.TableName())[outbox.MetricPending]
	assert.True(t, seen)
	require.NoError(t, o.Close())
	require.NoError(t, o.Close(), "Close is idempotent")
	_, seen = readings(t, reader, o.TableName())[outbox.MetricPending]
	assert.False(t, seen)
}

func TestOutboxReportsWhatItWasGiven(t *testing.T) {
	db := openSQLite(t)
	mp := sdkmetric.NewMeterProvider()
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	o, err := outbox.New(db, outbox.SQLite, outbox.WithMeterProvider(mp))
	require.NoError(t, err)
	defer o.Close()
	assert.Same(t, db, o.DB())
	assert.Equal(t, outbox.SQLite, o.Dialect())
	assert.Same(t, mp, o.MeterProvider())
}

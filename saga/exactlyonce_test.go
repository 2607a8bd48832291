package saga_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Progress is the state of the exactly-once test: how many times each
// step was applied, and how many committed steps created the instance.
type Progress struct {
	Applied map[int]int `json:"applied"`
	Created int         `json:"created"`
}

// StepDone is the message of step N of saga Saga.
type StepDone struct {
	Saga string `json:"saga"`
	N    int    `json:"n"`
}

// meters returns a meter provider whose readings the test collects.
func meters(t *testing.T) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, r
}

// sagaReadings returns the steps counter by outcome, and the open gauge
// under the key "open", of the saga name.
func sagaReadings(t *testing.T, r *sdkmetric.ManualReader, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/acemq/acemq/saga" {
			continue
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if v, _ := p.Attributes.Value("acemq.saga.name"); v == attribute.StringValue(name) {
						o, _ := p.Attributes.Value("acemq.saga.outcome")
						out[o.AsString()] += p.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if v, _ := p.Attributes.Value("acemq.saga.name"); v == attribute.StringValue(name) {
						out["open"] = p.Value
					}
				}
			}
		}
	}
	return out
}

// deliver hands every message to h on workers goroutines, as a consumer
// would, putting back each delivery h asks to retry, until every one was
// acked. Any other Ack fails the test.
func deliver[T any](t *testing.T, h acemq.Handler[T], workers int, msgs []*acemq.Message[T]) (retries int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	work := make(chan *acemq.Message[T], 4*len(msgs)+64)
	for _, m := range msgs {
		work <- m
	}
	var (
		outstanding = int64(len(msgs))
		retried     atomic.Int64
		wg          sync.WaitGroup
		closeOnce   sync.Once
	)
	finish := func() { closeOnce.Do(func() { close(work) }) }
	for range workers {
		wg.Go(func() {
			for m := range work {
				ack := h(ctx, m)
				switch {
				case ack.Kind() == acemq.AckRetry && ctx.Err() == nil:
					retried.Add(1)
					work <- m
					continue
				case ack.Kind() != acemq.AckDone:
					t.Errorf("message %s: %v %v", m.Envelope.ID, ack, ack.Err())
				}
				if atomic.AddInt64(&outstanding, -1) == 0 {
					finish()
				}
			}
		})
	}
	go func() { <-ctx.Done(); finish() }()
	wg.Wait()
	require.NoError(t, ctx.Err(), "the deliveries did not settle in time")
	return retried.Load()
}

// TestEachStepExactlyOnce is the promise: 100 sagas of 5 steps, every
// message delivered twice to 8 workers, a tenth of the steps failing once.
// Each step is applied once, its row written once and its message sent
// once; a failed run leaves nothing.
func TestEachStepExactlyOnce(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		const sagas, steps, workers = 100, 5, 8
		ctx := t.Context()
		mp, reader := meters(t)
		f := newFixture[Progress](t, db, d, saga.WithMeterProvider(mp))
		mq := connect(t, acemqtest.Memory(t))
		pub := outbox.NewPublisher[Notice](f.ob, mq, "", "notices")

		// The service's own table, written in the step's transaction.
		applied := unique(t, "applied")
		_, err := db.ExecContext(ctx, "CREATE TABLE "+applied+" (saga_id TEXT NOT NULL, step INTEGER NOT NULL)")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+applied) })
		insert := "INSERT INTO " + applied + " (saga_id, step) VALUES (?, ?)"
		if d == outbox.Postgres {
			insert = "INSERT INTO " + applied + " (saga_id, step) VALUES ($1, $2)"
		}

		errFlaky := errors.New("the payment provider timed out")
		var failedOnce sync.Map
		var failures atomic.Int64
		h := saga.Handle(f.saga, func(m *acemq.Message[StepDone]) string { return m.Payload.Saga },
			func(ctx context.Context, in *saga.Instance[Progress], m *acemq.Message[StepDone]) error {
				if in.State.Applied == nil {
					in.State.Applied = map[int]int{}
				}
				in.State.Applied[m.Payload.N]++
				if in.New() {
					in.State.Created++
				}
				if _, err := in.Tx.ExecContext(ctx, insert, in.ID, m.Payload.N); err != nil {
					return err
				}
				if err := pub.Send(ctx, in.Tx, Notice{OrderID: in.ID, Kind: fmt.Sprint(m.Payload.N)}, acemq.MessageID("out-"+m.Envelope.ID)); err != nil {
					return err
				}
				if len(in.State.Applied) == steps {
					in.Complete()
				}
				// A tenth of the steps fail on their first run, after
				// writing their row and their message.
				var i int
				_, _ = fmt.Sscanf(in.ID, "s-%d", &i)
				if (i*steps+m.Payload.N)%10 == 0 {
					if _, loaded := failedOnce.LoadOrStore(m.Envelope.ID, true); !loaded {
						failures.Add(1)
						return errFlaky
					}
				}
				return nil
			}, saga.Starts())

		var msgs []*acemq.Message[StepDone]
		for i := range sagas {
			for n := range steps {
				for range 2 {
					id := fmt.Sprintf("m-%d-%d", i, n)
					msgs = append(msgs, message(id, "", StepDone{Saga: fmt.Sprintf("s-%d", i), N: n}))
				}
			}
		}
		rand.Shuffle(len(msgs), func(a, b int) { msgs[a], msgs[b] = msgs[b], msgs[a] })
		retries := deliver(t, h, workers, msgs)

		require.Equal(t, int64(sagas*steps/10), failures.Load())
		for i := range sagas {
			snap, err := f.saga.Get(ctx, fmt.Sprintf("s-%d", i))
			require.NoError(t, err)
			assert.Equal(t, map[int]int{0: 1, 1: 1, 2: 1, 3: 1, 4: 1}, snap.State.Applied, "saga %d", i)
			assert.Equal(t, 1, snap.State.Created, "saga %d was created by one committed step", i)
			assert.Equal(t, int64(steps), snap.Version, "saga %d", i)
			assert.True(t, snap.Done, "saga %d", i)
		}
		var rows, distinct int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT saga_id || '/' || CAST(step AS TEXT)) FROM "+applied).Scan(&rows, &distinct))
		assert.Equal(t, sagas*steps, rows, "service rows")
		assert.Equal(t, sagas*steps, distinct, "service rows, distinct")
		ids := f.outboxIDs(t)
		assert.Len(t, ids, sagas*steps)
		for i := range sagas {
			for n := range steps {
				id := fmt.Sprintf("out-m-%d-%d", i, n)
				assert.Equal(t, 1, ids[id], "outbox rows of %s", id)
			}
		}

		got := sagaReadings(t, reader, f.saga.Name())
		assert.Equal(t, int64(sagas*steps), got[saga.OutcomeCommitted])
		assert.Equal(t, int64(sagas*steps), got[saga.OutcomeDuplicate], "each message's second copy")
		assert.Equal(t, int64(sagas*steps/10), got[saga.OutcomeFailed])
		assert.Zero(t, got["open"])
		t.Logf("%s: %d retried deliveries, %d version conflicts", d, retries, got[saga.OutcomeConflictRetried])

		// A later message for a completed saga is acked unhandled.
		before, _ := f.saga.Get(ctx, "s-7")
		require.Equal(t, acemq.AckDone, h(ctx, message("m-late", "", StepDone{Saga: "s-7", N: 9})).Kind())
		after, err := f.saga.Get(ctx, "s-7")
		require.NoError(t, err)
		assert.Equal(t, before, after)
		assert.Zero(t, f.outboxIDs(t)["out-m-late"])
	})
}

// TestTheOutboxsMeterProviderByDefault: without WithMeterProvider the
// saga's instruments are created where the outbox's are.
func TestTheOutboxsMeterProviderByDefault(t *testing.T) {
	t.Parallel()
	db := openSQLite(t)
	mp, reader := meters(t)
	ob, err := outbox.New(db, outbox.SQLite, outbox.WithMeterProvider(mp))
	require.NoError(t, err)
	defer ob.Close()
	require.NoError(t, ob.Migrate(t.Context()))
	s, err := saga.New[Checkout](ob, "metered")
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	h := saga.Handle(s, byCorrelationID[Event], func(context.Context, *saga.Instance[Checkout], *acemq.Message[Event]) error {
		return nil
	}, saga.Starts())
	require.Equal(t, acemq.AckDone, h(t.Context(), message("m-1", "o-1", Event{})).Kind())
	require.Equal(t, acemq.AckDone, h(t.Context(), message("m-1", "o-1", Event{})).Kind())
	got := sagaReadings(t, reader, "metered")
	assert.Equal(t, map[string]int64{saga.OutcomeCommitted: 1, saga.OutcomeDuplicate: 1, "open": 1}, got)
	require.NoError(t, s.Close())
	assert.NotContains(t, sagaReadings(t, reader, "metered"), "open", "Close unregistered the gauge")
}

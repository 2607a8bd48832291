package saga_test

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConcurrentCreators sends eight messages that may each start the same
// instance at once. On PostgreSQL the first eight runs wait for each other
// inside the step, so all of them find no instance and insert it; one wins,
// the others conflict and run again on the row it created.
func TestConcurrentCreators(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		const creators = 8
		ctx := t.Context()
		mp, reader := meters(t)
		f := newFixture[Progress](t, db, d, saga.WithMeterProvider(mp))
		var (
			arrived atomic.Int64
			gate    = make(chan struct{})
			once    sync.Once
		)
		h := saga.Handle(f.saga, byCorrelationID[StepDone], func(_ context.Context, in *saga.Instance[Progress], m *acemq.Message[StepDone]) error {
			if d == outbox.Postgres && arrived.Add(1) <= creators {
				if arrived.Load() == creators {
					once.Do(func() { close(gate) })
				}
				select {
				case <-gate:
				case <-time.After(5 * time.Second):
					t.Error("the creators did not all reach the step within 5s")
				}
			}
			if in.State.Applied == nil {
				in.State.Applied = map[int]int{}
			}
			in.State.Applied[m.Payload.N]++
			if in.New() {
				in.State.Created++
			}
			return nil
		}, saga.Starts())
		var msgs []*acemq.Message[StepDone]
		for n := range creators {
			msgs = append(msgs, message(fmt.Sprint("c-", n), "new-1", StepDone{N: n}))
		}
		deliver(t, h, creators, msgs)

		snap, err := f.saga.Get(ctx, "new-1")
		require.NoError(t, err)
		assert.Equal(t, 1, snap.State.Created, "one committed step created the instance")
		assert.Len(t, snap.State.Applied, creators)
		for n, c := range snap.State.Applied {
			assert.Equal(t, 1, c, "step %d", n)
		}
		assert.Equal(t, int64(creators), snap.Version)
		got := sagaReadings(t, reader, f.saga.Name())
		assert.Equal(t, int64(creators), got[saga.OutcomeCommitted])
		assert.Equal(t, int64(1), got["open"])
		if d == outbox.Postgres {
			assert.GreaterOrEqual(t, got[saga.OutcomeConflictRetried], int64(creators-1), "every creator but one lost the insert")
		}
	})
}

// TestConflictsRerunThenRetry changes the instance under every run of the
// step: the step runs 1 + MaxReruns times, then the message is retried
// with nothing written. PostgreSQL only: on SQLite the step's transaction
// holds the one connection, so nothing else can write meanwhile.
func TestConflictsRerunThenRetry(t *testing.T) {
	t.Parallel()
	db := openPostgres(t)
	ctx := t.Context()
	mp, reader := meters(t)
	f := newFixture[Checkout](t, db, outbox.Postgres, saga.WithMeterProvider(mp))
	start := saga.Handle(f.saga, byCorrelationID[Event], func(context.Context, *saga.Instance[Checkout], *acemq.Message[Event]) error {
		return nil
	}, saga.Starts())
	require.Equal(t, acemq.AckDone, start(ctx, message("m-1", "o-1", Event{})).Kind())

	var runs atomic.Int64
	var seen []int
	h := saga.Handle(f.saga, byCorrelationID[Event], func(ctx context.Context, in *saga.Instance[Checkout], _ *acemq.Message[Event]) error {
		runs.Add(1)
		seen = append(seen, len(in.State.Steps))
		in.State.Steps = append(in.State.Steps, "mine")
		// Another writer saves first, outside the step's transaction.
		_, err := db.ExecContext(ctx, "UPDATE "+f.saga.TableName()+` SET version = version + 1, state = '{"steps":["theirs"]}' WHERE id = $1`, in.ID)
		return err
	})
	ack := h(ctx, message("m-2", "o-1", Event{}))
	require.Equal(t, acemq.AckRetry, ack.Kind())
	assert.ErrorContains(t, ack.Err(), fmt.Sprintf(`saga %q with correlation ID "o-1": another step saved the instance first, %d times in a row`, f.saga.Name(), saga.MaxReruns+1))
	assert.Equal(t, int64(saga.MaxReruns+1), runs.Load())
	assert.Equal(t, []int{0, 1, 1, 1, 1, 1}, seen, "each rerun saw the fresh state")

	snap, err := f.saga.Get(ctx, "o-1")
	require.NoError(t, err)
	assert.Equal(t, []string{"theirs"}, snap.State.Steps, "the step's state was never saved")
	assert.Equal(t, int64(1+saga.MaxReruns+1), snap.Version)
	got := sagaReadings(t, reader, f.saga.Name())
	assert.Equal(t, int64(saga.MaxReruns+1), got[saga.OutcomeConflictRetried])
	assert.Equal(t, int64(1), got[saga.OutcomeCommitted])

	// The claim rolled back with the step: the retry runs.
	h2 := saga.Handle(f.saga, byCorrelationID[Event], func(_ context.Context, in *saga.Instance[Checkout], _ *acemq.Message[Event]) error {
		in.State.Steps = append(in.State.Steps, "mine")
		return nil
	})
	require.Equal(t, acemq.AckDone, h2(ctx, message("m-2", "o-1", Event{})).Kind())
	snap, err = f.saga.Get(ctx, "o-1")
	require.NoError(t, err)
	steps := append([]string(nil), snap.State.Steps...)
	sort.Strings(steps)
	assert.Equal(t, []string{"mine", "theirs"}, steps)
}

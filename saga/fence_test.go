package saga_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
	"github.com/stretchr/testify/require"
)

// fenced is a message of an ordered consumer's partition 0 with fence.
func fenced(id string, fence uint64, n int) *acemq.Message[StepDone] {
	m := message(id, "inst", StepDone{N: n})
	m.SetFence(0, fence)
	return m
}

// A step whose message carries a fence below the one that last saved the
// instance (a stale holder of the partition) is refused: the step does not
// run, nothing of it is saved (state, inbox, outbox), and the handler asks
// for a retry wrapping acemq.ErrPartitionLost, which an ordered consumer
// turns into giving the delivery back. The same message from the current
// holder then commits. Steps of unordered messages (fence 0) leave the
// fence as it is. Migrate adds the column to a table made without it.
func TestAStaleFenceIsRefused(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		ctx := t.Context()
		f := newFixture[Progress](t, db, d)
		// A table of before the fence column: Migrate adds it.
		_, err := db.ExecContext(ctx, "ALTER TABLE "+f.saga.TableName()+" DROP COLUMN fence")
		require.NoError(t, err)
		require.NoError(t, f.saga.Migrate(ctx))
		require.NoError(t, f.saga.Migrate(ctx), "a second Migrate")

		mq := connect(t, acemqtest.Memory(t))
		pub := outbox.NewPublisher[Notice](f.ob, mq, "", "notices")
		var ran atomic.Int64
		h := saga.Handle(f.saga, byCorrelationID[StepDone], func(ctx context.Context, in *saga.Instance[Progress], m *acemq.Message[StepDone]) error {
			ran.Add(1)
			if in.State.Applied == nil {
				in.State.Applied = map[int]int{}
			}
			in.State.Applied[m.Payload.N]++
			return pub.Send(ctx, in.Tx, Notice{OrderID: in.ID, Kind: fmt.Sprint(m.Payload.N)}, acemq.MessageID("out-"+m.Envelope.ID))
		}, saga.Starts())
		fenceOf := func() int64 {
			q := "SELECT fence FROM " + f.saga.TableName() + " WHERE id = ?"
			if d == outbox.Postgres {
				q = "SELECT fence FROM " + f.saga.TableName() + " WHERE id = $1"
			}
			var n int64
			require.NoError(t, db.QueryRowContext(ctx, q, "inst").Scan(&n))
			return n
		}
		done := func(m *acemq.Message[StepDone]) {
			t.Helper()
			ack := h(ctx, m)
			require.Equal(t, acemq.AckDone, ack.Kind(), "%s: %v", m.Envelope.ID, ack.Err())
		}

		done(fenced("m1", 5, 1))
		require.EqualValues(t, 5, fenceOf())

		ack := h(ctx, fenced("m2", 3, 2))
		require.Equal(t, acemq.AckRetry, ack.Kind())
		require.ErrorIs(t, ack.Err(), acemq.ErrPartitionLost)
		require.EqualValues(t, 1, ran.Load(), "the stale step did not run")
		snap, err := f.saga.Get(ctx, "inst")
		require.NoError(t, err)
		require.EqualValues(t, 1, snap.Version, "the stale step saved nothing")
		require.NotContains(t, f.outboxIDs(t), "out-m2", "no outbox row of the stale step")

		done(fenced("m3", 5, 3)) // the same holder
		done(fenced("m2", 7, 2)) // the refused message, from the new holder
		require.EqualValues(t, 7, fenceOf())
		done(message("m4", "inst", StepDone{N: 4})) // unordered: fence 0
		require.EqualValues(t, 7, fenceOf(), "an unfenced step keeps the fence")

		ack = h(ctx, fenced("m5", 6, 5))
		require.True(t, errors.Is(ack.Err(), acemq.ErrPartitionLost), "a fence between: %v", ack.Err())
		snap, err = f.saga.Get(ctx, "inst")
		require.NoError(t, err)
		require.EqualValues(t, 4, snap.Version)
		require.Equal(t, map[int]int{1: 1, 2: 1, 3: 1, 4: 1}, snap.State.Applied)
		ids := f.outboxIDs(t)
		for _, id := range []string{"out-m1", "out-m2", "out-m3", "out-m4"} {
			require.Equal(t, 1, ids[id], id)
		}
		require.NotContains(t, ids, "out-m5")
	})
}

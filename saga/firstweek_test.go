package saga_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
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
)

// logs is a slog.Handler that keeps every record.
type logs struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}
func (l *logs) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logs) WithGroup(string) slog.Handler      { return l }

// at returns the records of level lvl, each as its message and attributes.
func (l *logs) at(lvl slog.Level) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.recs {
		if r.Level != lvl {
			continue
		}
		m := map[string]string{"msg": r.Message}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		out = append(out, m)
	}
	return out
}

// unmigrated is a saga over a migrated outbox whose own table and inbox
// were not created; whatever the test migrates is dropped when it ends.
func unmigrated(t *testing.T, db *sql.DB, d outbox.Dialect, log *slog.Logger) (*saga.Saga[Checkout], *outbox.Inbox) {
	t.Helper()
	ob, err := outbox.New(db, d, outbox.Table(unique(t, "saga_outbox")))
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(t.Context()))
	in, err := outbox.NewInbox(db, d, outbox.Table(unique(t, "saga_inbox")))
	require.NoError(t, err)
	s, err := saga.New[Checkout](ob, unique(t, "t"), saga.WithInbox(in), saga.WithLogger(log))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Drop(ctx))
		require.NoError(t, in.Drop(ctx))
		require.NoError(t, ob.Drop(ctx))
		require.NoError(t, s.Close())
		require.NoError(t, ob.Close())
	})
	return s, in
}

// A saga whose table does not exist says so, and what to call, from Check
// and from its handler's first message, before any transaction: the step
// does not run, the message is retried (not rejected or dead-lettered at
// once), the Error is logged once, and once Migrate ran the same handler
// works.
func TestAMissingTableIsNamedWithWhatToCall(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		ctx := t.Context()
		rec := &logs{}
		s, in := unmigrated(t, db, d, slog.New(rec))
		want := fmt.Sprintf(`saga: table %s of saga %q does not exist; call Saga.Migrate first`, s.TableName(), s.Name())

		err := s.Check(ctx)
		require.ErrorIs(t, err, saga.ErrNotMigrated)
		assert.EqualError(t, err, want)

		var steps atomic.Int32
		h := saga.Handle(s, byCorrelationID[Event], func(_ context.Context, in *saga.Instance[Checkout], _ *acemq.Message[Event]) error {
			steps.Add(1)
			in.State.Status = "started"
			return nil
		}, saga.Starts())
		for i := range 3 {
			ack := h(ctx, message(fmt.Sprintf("m-%d", i), "t-1", Event{Kind: "placed"}))
			assert.Equal(t, acemq.AckRetry, ack.Kind(), "a missing table is retried down the ladder")
			assert.EqualError(t, ack.Err(), want)
			assert.ErrorIs(t, ack.Err(), saga.ErrNotMigrated)
		}
		assert.Zero(t, steps.Load(), "no step runs without the table")
		errs := rec.at(slog.LevelError)
		require.Len(t, errs, 1, "the missing table is logged once, not per message")
		assert.Equal(t, s.Name(), errs[0]["saga"])
		assert.Equal(t, want, errs[0]["error"])

		// The saga's table alone is not enough: the inbox's is named too.
		_, err = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+in.TableName())
		require.NoError(t, err)
		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, in.Drop(ctx))
		err = s.Check(ctx)
		require.ErrorIs(t, err, saga.ErrNotMigrated)
		assert.EqualError(t, err, fmt.Sprintf(`saga: inbox table %s of saga %q does not exist; call Saga.Migrate first`, in.TableName(), s.Name()))

		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Check(ctx))
		ack := h(ctx, message("m-3", "t-1", Event{Kind: "placed"}))
		require.Equal(t, acemq.AckDone, ack.Kind(), "%v", ack.Err())
		snap, err := s.Get(ctx, "t-1")
		require.NoError(t, err)
		assert.Equal(t, "started", snap.State.Status)
		assert.Equal(t, int32(1), steps.Load())
	})
}

// A step that panics is rejected, and its stack is logged once, at Error,
// by the saga, with the message ID and the correlation ID, not a second
// time by the engine: through a real consumer, on both databases.
func TestAStepThatPanicsLogsItsStackOnce(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			url := acemqtest.Memory(t)
			ctx := t.Context()
			queue := acemqtest.QueueName(t, "saga-panic")
			acemqtest.DeleteQueuesAfter(t, url, queue)
			sagaLog, connLog := &logs{}, &logs{}
			settled := make(chan acemq.Settlement, 4)
			mq := connect(t, url, acemq.WithLogger(slog.New(connLog)),
				acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
			f := newFixture[Checkout](t, d.open(t), d.dialect, saga.WithLogger(slog.New(sagaLog)))

			var m map[string]int
			h := saga.Handle(f.saga, byCorrelationID[Event], func(_ context.Context, in *saga.Instance[Checkout], _ *acemq.Message[Event]) error {
				in.State.Status = "half done"
				m["steps"]++ // assignment to entry in nil map
				return nil
			}, saga.Starts())
			cons, err := acemq.NewConsumer(mq, queue, h)
			require.NoError(t, err)
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- cons.Run(runCtx) }()
			defer func() { stop(); require.NoError(t, <-done) }()

			pub := acemq.NewPublisher[Event](mq, "", queue)
			require.NoError(t, pub.Send(ctx, Event{Kind: "placed"}, acemq.CorrelationID("t-0000"), acemq.MessageID("m-panic")))
			var s acemq.Settlement
			select {
			case s = <-settled:
			case <-time.After(20 * time.Second):
				t.Fatal("the message did not settle in 20s")
			}
			assert.Equal(t, acemq.OutcomeRejected, s.Outcome, "a panic is rejected, as the engine rejects one")
			assert.Equal(t, fmt.Sprintf(`the handler rejected it: saga %q: the step panicked on correlation ID "t-0000": assignment to entry in nil map`, f.saga.Name()), s.Reason)

			errs := sagaLog.at(slog.LevelError)
			require.Len(t, errs, 1)
			assert.Equal(t, "m-panic", errs[0]["id"])
			assert.Equal(t, "t-0000", errs[0]["correlation_id"])
			assert.Equal(t, f.saga.Name(), errs[0]["saga"])
			assert.Equal(t, queue, errs[0]["queue"])
			assert.Contains(t, errs[0]["panic"], "assignment to entry in nil map")
			assert.Contains(t, errs[0]["stack"], "saga_test.TestAStepThatPanicsLogsItsStackOnce", "the stack reaches the step that panicked")
			for _, r := range connLog.at(slog.LevelError) {
				assert.NotContains(t, r["msg"]+r["panic"]+r["stack"], "nil map", "the engine logs the panic a second time: %v", r)
			}
			_, err = f.saga.Get(ctx, "t-0000")
			assert.ErrorIs(t, err, saga.ErrNotFound, "the panicking step's transaction rolled back")
		})
	}
}

// A correlate function that panics is recovered the same way; the log has
// no correlation ID to give.
func TestACorrelateThatPanicsIsRejected(t *testing.T) {
	t.Parallel()
	rec := &logs{}
	f := newFixture[Checkout](t, openSQLite(t), outbox.SQLite, saga.WithLogger(slog.New(rec)))
	h := saga.Handle(f.saga, func(m *acemq.Message[Event]) string {
		return strings.Repeat("x", 1)[m.Envelope.Attempt+1:] // slice bounds out of range
	}, func(context.Context, *saga.Instance[Checkout], *acemq.Message[Event]) error { return nil }, saga.Starts())
	ack := h(t.Context(), message("m-1", "t-1", Event{}))
	assert.Equal(t, acemq.AckReject, ack.Kind())
	assert.ErrorContains(t, ack.Err(), fmt.Sprintf(`saga %q: the correlate function panicked on message "m-1": runtime error: slice bounds out of range`, f.saga.Name()))
	errs := rec.at(slog.LevelError)
	require.Len(t, errs, 1)
	assert.Equal(t, "m-1", errs[0]["id"])
	assert.Empty(t, errs[0]["correlation_id"])
}

// Behind a real consumer, a missing table costs attempts, not messages: the
// message is retried with the reason, and once Migrate runs, the retry
// commits.
func TestAMigrationWithinTheLadderLosesNothing(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			url := acemqtest.Memory(t)
			ctx := t.Context()
			queue := acemqtest.QueueName(t, "saga-migrate")
			settled := make(chan acemq.Settlement, 16)
			mq := connect(t, url, acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
			s, _ := unmigrated(t, d.open(t), d.dialect, quiet)
			h := saga.Handle(s, byCorrelationID[Event], func(_ context.Context, in *saga.Instance[Checkout], _ *acemq.Message[Event]) error {
				in.State.Status = "opened"
				return nil
			}, saga.Starts())
			cons, err := acemq.NewConsumer(mq, queue, h, acemq.WithConsumerRetry(acemq.RetryPolicy{
				MaxAttempts: 20, Delays: []time.Duration{50 * time.Millisecond}}))
			require.NoError(t, err)
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- cons.Run(runCtx) }()
			defer func() { stop(); require.NoError(t, <-done) }()

			require.NoError(t, acemq.NewPublisher[Event](mq, "", queue).Send(ctx, Event{}, acemq.CorrelationID("t-1")))
			next := func() acemq.Settlement {
				select {
				case st := <-settled:
					return st
				case <-time.After(20 * time.Second):
					t.Fatal("nothing settled in 20s")
					return acemq.Settlement{}
				}
			}
			first := next()
			assert.Equal(t, acemq.OutcomeRetried, first.Outcome)
			assert.Equal(t, fmt.Sprintf(`saga: table %s of saga %q does not exist; call Saga.Migrate first`, s.TableName(), s.Name()), first.Reason)
			require.NoError(t, s.Migrate(ctx))
			for st := next(); st.Outcome != acemq.OutcomeAcked; st = next() {
				require.Equal(t, acemq.OutcomeRetried, st.Outcome, st.Reason)
			}
			snap, err := s.Get(ctx, "t-1")
			require.NoError(t, err)
			assert.Equal(t, "opened", snap.State.Status)
		})
	}
}

package patterns_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// records is a slog.Handler that keeps every record.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// errors returns the Error records, each as its message and attributes.
func (r *records) errors() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, rec := range r.recs {
		if rec.Level != slog.LevelError {
			continue
		}
		m := map[string]string{"msg": rec.Message}
		rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		out = append(out, m)
	}
	return out
}

// rows is a batch of n messages whose payload's TotalCents is its index.
func rows(n int) []*acemq.Message[OrderPlaced] {
	out := make([]*acemq.Message[OrderPlaced], n)
	for i := range out {
		out[i] = &acemq.Message[OrderPlaced]{
			Payload:  OrderPlaced{OrderID: fmt.Sprintf("o-%d", i), TotalCents: int64(i)},
			Envelope: &acemq.Envelope{ID: fmt.Sprintf("m-%d", i), Attempt: 1},
			Queue:    "ledger",
		}
	}
	return out
}

// table is an all-or-nothing batch insert that refuses the rows in bad
// and counts its calls; committed counts what each row committed.
type table struct {
	bad       map[int64]bool
	calls     int
	committed map[int64]int
}

func newTable(bad ...int) *table {
	t := &table{bad: map[int64]bool{}, committed: map[int64]int{}}
	for _, b := range bad {
		t.bad[int64(b)] = true
	}
	return t
}

func (t *table) insert(_ context.Context, batch []*acemq.Message[OrderPlaced]) error {
	t.calls++
	for _, m := range batch {
		if t.bad[m.Payload.TotalCents] {
			return fmt.Errorf("row %d violates check constraint", m.Payload.TotalCents)
		}
	}
	for _, m := range batch {
		t.committed[m.Payload.TotalCents]++
	}
	return nil
}

// check asserts each row of batch got Done once committed exactly once,
// and that every bad row got AckOf of its own error, committed never.
func (t *table) check(tb testing.TB, batch []*acemq.Message[OrderPlaced], acks []acemq.Ack) {
	tb.Helper()
	require.Len(tb, acks, len(batch))
	for i, m := range batch {
		row := m.Payload.TotalCents
		if t.bad[row] {
			require.Equal(tb, acemq.AckRetry, acks[i].Kind(), "row %d", row)
			require.EqualError(tb, acks[i].Err(), fmt.Sprintf("row %d violates check constraint", row))
			require.Zero(tb, t.committed[row], "row %d", row)
			continue
		}
		require.Equal(tb, acemq.AckDone, acks[i].Kind(), "row %d: %v", row, acks[i].Err())
		require.Equal(tb, 1, t.committed[row], "row %d committed once", row)
	}
}

func log2ceil(n int) int { return int(math.Ceil(math.Log2(float64(n)))) }

// One bad row among 2,000, wherever it is, costs at most 2·⌈log2 2000⌉ =
// 22 extra calls: exactly 22 when it is the first row, 11 when the last.
// (Each position costs between: a part calls its second half only when its
// first half failed too.)
func TestBisectFindsOneBadRowInLog2Calls(t *testing.T) {
	t.Parallel()
	const n = 2000
	batch := rows(n)
	bound := 2 * log2ceil(n)
	require.Equal(t, 22, bound)
	worst, best, sum := 0, n, 0
	// Every position would take a minute under -race: the ends, and a
	// spread of 50 positions between them.
	positions := []int{0, 1, n / 2, n - 2, n - 1}
	for p := 3; p < n; p += 40 {
		positions = append(positions, p)
	}
	for _, bad := range positions {
		tb := newTable(bad)
		acks := patterns.Bisect(tb.insert)(t.Context(), batch)
		tb.check(t, batch, acks)
		extra := tb.calls - 1
		require.LessOrEqual(t, extra, bound, "bad row %d", bad)
		worst, best, sum = max(worst, extra), min(best, extra), sum+extra
		switch bad {
		case 0:
			assert.Equal(t, 22, extra, "the first row: both halves called at every level")
		case n - 1:
			assert.Equal(t, 11, extra, "the last row: the second half is inferred at every level")
		}
	}
	t.Logf("1 bad row in %d: %d to %d extra calls, %.1f on average (bound %d)", n, best, worst, float64(sum)/float64(len(positions)), bound)
}

// k bad rows spread over the batch cost at most 2·k·⌈log2 n⌉ extra calls;
// all bad, exactly 2·(n−1).
func TestBisectBoundsTheCallsForManyBadRows(t *testing.T) {
	t.Parallel()
	const n = 2000
	batch := rows(n)
	for _, k := range []int{2, 3, 7, 20, 100} {
		bad := make([]int, k)
		for i := range bad {
			bad[i] = (i*n)/k + (i*37)%(n/k) // spread, not evenly
		}
		tb := newTable(bad...)
		acks := patterns.Bisect(tb.insert)(t.Context(), batch)
		tb.check(t, batch, acks)
		assert.LessOrEqual(t, tb.calls-1, min(2*k*log2ceil(n), 2*(n-1)), "k=%d", k)
		t.Logf("%d bad rows in %d: %d extra calls (bound %d)", k, n, tb.calls-1, 2*k*log2ceil(n))
	}
	for _, n := range []int{1, 2, 3, 100, 2000} {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		tb := newTable(all...)
		acks := patterns.Bisect(tb.insert)(t.Context(), rows(n))
		tb.check(t, rows(n), acks)
		assert.Equal(t, 2*(n-1), tb.calls-1, "all %d bad", n)
	}
	// A clean batch: one call, all Done; an empty one: no call.
	tb := newTable()
	tb.check(t, batch, patterns.Bisect(tb.insert)(t.Context(), batch))
	assert.Equal(t, 1, tb.calls)
	tb = newTable()
	assert.Empty(t, patterns.Bisect(tb.insert)(t.Context(), nil))
	assert.Zero(t, tb.calls)
}

// A bad row isolated gets AckOf of its error: a Fatal one is dead-lettered
// at once, as from a plain handler.
func TestBisectGivesTheIsolatedRowAckOfItsError(t *testing.T) {
	t.Parallel()
	h := patterns.Bisect(func(_ context.Context, batch []*acemq.Message[OrderPlaced]) error {
		for _, m := range batch {
			if m.Payload.TotalCents == 5 {
				return acemq.Fatal(errors.New("row 5 is malformed"))
			}
		}
		return nil
	})
	acks := h(t.Context(), rows(8))
	for i, a := range acks {
		if i == 5 {
			assert.Equal(t, acemq.AckFatal, a.Kind())
			assert.ErrorIs(t, a.Err(), acemq.ErrFatal)
			continue
		}
		assert.Equal(t, acemq.AckDone, a.Kind(), "row %d", i)
	}
}

// When ctx ends in the middle, no further call is made: what committed is
// Done, the rest is retried with ctx's error, nothing is left without an
// Ack.
func TestBisectStopsWhenCtxEnds(t *testing.T) {
	t.Parallel()
	const n = 64
	tb := newTable(20, 40)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	calls := 0
	h := patterns.Bisect(func(ctx context.Context, batch []*acemq.Message[OrderPlaced]) error {
		calls++
		// [0,64) fails, [0,32) fails, [0,16) commits, [16,24) fails; the
		// fifth call, [16,20), is cut short by the shutdown.
		if calls == 5 {
			cancel()
			return ctx.Err()
		}
		return tb.insert(ctx, batch)
	})
	batch := rows(n)
	acks := h(ctx, batch)
	require.Len(t, acks, n)
	assert.Equal(t, 5, calls, "no call after ctx ended")
	retried := 0
	for i, a := range acks {
		row := batch[i].Payload.TotalCents
		switch a.Kind() {
		case acemq.AckDone:
			assert.Equal(t, 1, tb.committed[row], "row %d is Done only if it committed", row)
		case acemq.AckRetry:
			retried++
			assert.ErrorIs(t, a.Err(), context.Canceled, "row %d", row)
			assert.Zero(t, tb.committed[row])
		default:
			t.Fatalf("row %d got %v: %v", row, a.Kind(), a.Err())
		}
	}
	assert.Equal(t, n-tbCommitted(tb), retried, "every row not committed is retried")
	assert.Equal(t, 16, tbCommitted(tb), "the part that passed before ctx ended stays Done")
}

func tbCommitted(tb *table) int {
	n := 0
	for _, c := range tb.committed {
		n += c
	}
	return n
}

// A panic on one row is split like an error: that row alone is rejected,
// logged once with the stack; the rest commit. A panic on every row rejects
// every row, still logging once.
func TestBisectIsolatesARowThatPanics(t *testing.T) {
	t.Parallel()
	rec := &records{}
	var nilMap map[string]int
	h := patterns.Bisect(func(_ context.Context, batch []*acemq.Message[OrderPlaced]) error {
		for _, m := range batch {
			if m.Payload.TotalCents == 3 {
				nilMap["x"]++ // assignment to entry in nil map
			}
		}
		return nil
	}, patterns.BisectLogger(slog.New(rec)))
	acks := h(t.Context(), rows(10))
	for i, a := range acks {
		if i == 3 {
			assert.Equal(t, acemq.AckReject, a.Kind())
			assert.EqualError(t, a.Err(), "patterns: the batch function panicked on this message alone: assignment to entry in nil map")
			continue
		}
		assert.Equal(t, acemq.AckDone, a.Kind(), "row %d", i)
	}
	logged := rec.errors()
	require.Len(t, logged, 1)
	assert.Equal(t, "m-3", logged[0]["id"])
	assert.Equal(t, "ledger", logged[0]["queue"])
	assert.Contains(t, logged[0]["stack"], "patterns_test.TestBisectIsolatesARowThatPanics")

	rec = &records{}
	h = patterns.Bisect(func(context.Context, []*acemq.Message[OrderPlaced]) error { panic("the pool is gone") },
		patterns.BisectLogger(slog.New(rec)))
	for i, a := range h(t.Context(), rows(5)) {
		assert.Equal(t, acemq.AckReject, a.Kind(), "row %d", i)
	}
	assert.Len(t, rec.errors(), 1, "logged once per batch")
}

// SplitIf keeps an outage from being bisected: the whole part is retried
// after one call.
func TestBisectSplitsOnlyWhatSplitIfSays(t *testing.T) {
	t.Parallel()
	down := errors.New("connection refused")
	calls := 0
	h := patterns.Bisect(func(context.Context, []*acemq.Message[OrderPlaced]) error { calls++; return down },
		patterns.SplitIf(func(err error) bool { return !errors.Is(err, down) }))
	for _, a := range h(t.Context(), rows(100)) {
		assert.Equal(t, acemq.AckRetry, a.Kind())
		assert.ErrorIs(t, a.Err(), down)
	}
	assert.Equal(t, 1, calls)
}

// A nil function or option retries every message, saying which.
func TestBisectRefusesNil(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		h    acemq.BatchHandler[OrderPlaced]
		want string
	}{
		"nil function": {patterns.Bisect[OrderPlaced](nil), "patterns: Bisect was given a nil function"},
		"nil option":   {patterns.Bisect(newTable().insert, nil), "patterns: a nil BisectOption was given"},
		"nil SplitIf":  {patterns.Bisect(newTable().insert, patterns.SplitIf(nil)), "patterns: SplitIf was given a nil function"},
		"nil logger":   {patterns.Bisect(newTable().insert, patterns.BisectLogger(nil)), "patterns: BisectLogger was given nil"},
	} {
		acks := tc.h(t.Context(), rows(3))
		require.Len(t, acks, 3, name)
		for _, a := range acks {
			assert.Equal(t, acemq.AckRetry, a.Kind(), name)
			assert.EqualError(t, a.Err(), tc.want, name)
		}
	}
}

// Through a batch consumer on both transports: the one bad row of a batch
// goes down the ladder alone (here straight to the dlq: one attempt) and
// the others are acked.
func TestBisectBehindABatchConsumer(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			settled := map[string]acemq.Settlement{}
			c := connect(t, b.url(t), acemq.OnSettled(func(_ context.Context, s acemq.Settlement) {
				mu.Lock()
				defer mu.Unlock()
				settled[s.Envelope.ID] = s
			}))
			q := queue(t, c, "bisect", defaultTiers...)
			var (
				tmu sync.Mutex
				tb  = newTable(7)
			)
			cons, err := acemq.NewBatchConsumer(c, q, patterns.Bisect(func(ctx context.Context, batch []*acemq.Message[OrderPlaced]) error {
				tmu.Lock()
				defer tmu.Unlock()
				return tb.insert(ctx, batch)
			}), acemq.BatchSize(20), acemq.BatchWait(200*time.Millisecond),
				acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 1}))
			require.NoError(t, err)
			pub := acemq.NewPublisher[OrderPlaced](c, "", q)
			for i := range 20 {
				require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: fmt.Sprintf("o-%d", i), TotalCents: int64(i)},
					acemq.MessageID(fmt.Sprintf("m-%d", i))))
			}
			run(t, cons)
			require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(settled) == 20 }, 20*time.Second, 10*time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			for id, s := range settled {
				if id == "m-7" {
					assert.Equal(t, acemq.OutcomeDeadLettered, s.Outcome)
					assert.True(t, strings.HasSuffix(s.Reason, "row 7 violates check constraint"), s.Reason)
					continue
				}
				assert.Equal(t, acemq.OutcomeAcked, s.Outcome, id)
			}
			tmu.Lock()
			defer tmu.Unlock()
			assert.Len(t, tb.committed, 19)
		})
	}
}

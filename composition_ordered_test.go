package acemq_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// The composition pairs of ordered consumers with releases, fencing, the
// kill switch and Close; of batch consumers with the kill switch and
// Close; of sagas with ordered releases and fencing; and of the outbox
// with ordered keys.

var _ = registerPair(pair{
	a: "ordered", b: "release rerun",
	holds: "the message that blocked the key runs first, then the held ones in order, then newer ones; the re-run message leaves .dlq; the key's held and re-run queues are deleted",
	run: func(t *testing.T, url string) {
		b := newBlockedAt10(t, url, false)
		ten := dead(t, b.c, b.q)
		require.Len(t, ten, 1)
		back := ten[0].Message
		back.Exchange, back.RoutingKey = "", acemq.DeadLetterQueue(b.q)
		publishAll(t, b.c, []transport.Message{back})
		b.failing.Store(false)
		require.NoError(t, acemq.ReleaseKey(ctxT(t), b.c, b.q, "k", acemq.RerunFailed()))
		b.publish(51, 52)
		require.Equal(t, append(seq(1, 10), seq(10, 52)...), b.waitHandled(53))
		b.waitReleased()
		require.Empty(t, dead(t, b.c, b.q), "the re-run message left .dlq")
	},
})

var _ = registerPair(pair{
	a: "ordered", b: "release skip",
	holds: "the held messages run in order without the one that blocked the key, which stays in .dlq; the key's queues are deleted",
	run: func(t *testing.T, url string) {
		b := newBlockedAt10(t, url, false)
		require.NoError(t, acemq.ReleaseKey(ctxT(t), b.c, b.q, "k", acemq.SkipFailed()))
		require.Equal(t, seq(1, 50), b.waitHandled(50))
		b.waitReleased()
		left := dead(t, b.c, b.q)
		require.Len(t, left, 1, "the skipped message stays in .dlq")
		var s Step
		require.NoError(t, json.Unmarshal(left[0].Body, &s))
		require.Equal(t, 10, s.N)
	},
})

// fenceStore is a store that keeps the recipe's rule (docs/ordering.md):
// a row takes a write whose token is at least the row's, or 0.
type fenceStore struct {
	mu      sync.Mutex
	rows    map[string][2]uint64 // key -> n, fence
	refused int
}

func (s *fenceStore) save(m *acemq.Message[Step]) acemq.Ack {
	s.mu.Lock()
	defer s.mu.Unlock()
	row, f := s.rows[m.Payload.Key], m.Fence()
	if f != 0 && row[1] > f {
		s.refused++
		return acemq.Retry(fmt.Errorf("key %s: row fence %d above %d: %w", m.Payload.Key, row[1], f, acemq.ErrPartitionLost))
	}
	s.rows[m.Payload.Key] = [2]uint64{uint64(m.Payload.N), max(row[1], f)}
	return acemq.Done()
}

func (s *fenceStore) last(key string) (n, fence uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[key]
	return r[0], r[1]
}

var _ = registerPair(pair{
	a: "ordered", b: "fencing",
	holds: "after the holder's Conn goes, the next holder writes with a greater token, every key ends with its last number, the numbers of a key never go back, and no write is refused in a loop",
	run: func(t *testing.T, url string) {
		q := orderedQueue(t, url, 2)
		store := &fenceStore{rows: map[string][2]uint64{}}
		log := newOrderLog()
		start := func(c *acemq.Conn) {
			cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
				done := log.start(m.Payload)
				ack := store.save(m)
				done(ack.Kind() == acemq.AckDone)
				return ack
			}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}), acemq.Concurrency(4))
			require.NoError(t, err)
			run(t, cons)
		}
		a := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		start(a)
		keys := []string{"a", "b", "c", "d"}
		send := func(c *acemq.Conn, from, to int) {
			var ms []transport.Message
			for n := from; n <= to; n++ {
				for _, k := range keys {
					ms = append(ms, keyed(t, q, Step{Key: k, N: n}))
				}
			}
			publishAll(t, c, ms)
		}
		send(a, 1, 10)
		within(t, 30*time.Second, "A handled 1…10", func() bool { return log.handled() >= 40 })
		_, fenceA := store.last("a")
		require.NotZero(t, fenceA)
		b := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		start(b)
		require.NoError(t, a.Close())
		send(b, 11, 20)
		within(t, 30*time.Second, "every key's last number written", func() bool {
			for _, k := range keys {
				if n, _ := store.last(k); n != 20 {
					return false
				}
			}
			return true
		})
		for _, k := range keys {
			_, f := store.last(k)
			require.Greater(t, f, fenceA, "key %s was last written by the new holder's greater token", k)
		}
		log.checkInOrder(t, keys, 20)
		store.mu.Lock()
		defer store.mu.Unlock()
		require.LessOrEqual(t, store.refused, 8, "refusals are a hand-over's few, not a loop")
	},
})

var _ = registerPair(pair{
	a: "ordered", b: "kill switch",
	holds: "failures in place trip the switch and Health says paused; once the dependency is back the probe resumes it, every key's messages are handled in order and nothing reaches .dlq",
	run: func(t *testing.T, url string) {
		q := orderedQueue(t, url, 2)
		c := connectURL(t, url, acemq.WithRetryPolicy(acemq.RetryPolicy{MaxAttempts: 20, Delays: []time.Duration{20 * time.Millisecond}}))
		var failing atomic.Bool
		failing.Store(true)
		log := newOrderLog()
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			if failing.Load() {
				return acemq.Retry(errors.New("the database is down"))
			}
			log.start(m.Payload)(true)
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}), acemq.Concurrency(4),
			acemq.KillSwitch(acemq.KillSwitchPolicy{MinFailures: 3, Threshold: 0.5, CoolDown: 200 * time.Millisecond}))
		require.NoError(t, err)
		run(t, cons)
		keys := []string{"a", "b", "c"}
		var ms []transport.Message
		for n := 1; n <= 10; n++ {
			for _, k := range keys {
				ms = append(ms, keyed(t, q, Step{Key: k, N: n}))
			}
		}
		publishAll(t, c, ms)
		within(t, 30*time.Second, "the kill switch to trip", func() bool {
			return healthSays(c, "paused by the kill switch")
		})
		failing.Store(false)
		within(t, 30*time.Second, "every message handled after the probe", func() bool { return log.handled() == 30 })
		log.checkInOrder(t, keys, 10)
		require.NoError(t, c.Health(ctxT(t)))
		require.Empty(t, dead(t, c, q))
	},
})

var _ = registerPair(pair{
	a: "ordered", b: "Close during a release",
	holds: "a Conn closed while its release runs the held messages loses none: the next instance finishes the release, the key's numbers never go back, none is missing, and the key's queues are deleted",
	run: func(t *testing.T, url string) {
		q := orderedQueue(t, url, 1, "k")
		log := newOrderLog()
		var failing atomic.Bool
		failing.Store(true)
		start := func(c *acemq.Conn) {
			cons, err := acemq.NewConsumer(c, q, func(ctx context.Context, m *acemq.Message[Step]) acemq.Ack {
				if m.Payload.N == 10 && failing.Load() {
					return acemq.Reject(errors.New("customer 42 does not exist"))
				}
				done := log.start(m.Payload)
				if m.Payload.N > 10 {
					time.Sleep(10 * time.Millisecond) // the release takes a while
				}
				done(true)
				return acemq.Done()
			}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1, BlockOnFailure: true}), acemq.Concurrency(2))
			require.NoError(t, err)
			run(t, cons)
		}
		a := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		start(a)
		var ms []transport.Message
		for n := 1; n <= 60; n++ {
			ms = append(ms, keyed(t, q, Step{Key: "k", N: n}))
		}
		publishAll(t, a, ms)
		within(t, 30*time.Second, "k blocked with 50 held", func() bool {
			keys, err := acemq.BlockedKeys(ctxT(t), a, q)
			require.NoError(t, err)
			return len(keys) == 1 && keys[0].Held == 50
		})
		failing.Store(false)
		require.NoError(t, acemq.ReleaseKey(ctxT(t), a, q, "k", acemq.RerunFailed()))
		within(t, 30*time.Second, "the release under way", func() bool { return log.handled() >= 15 })
		require.NoError(t, a.Close())
		b := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		start(b)
		within(t, 60*time.Second, "the release finished by the next instance", func() bool {
			keys, err := acemq.BlockedKeys(ctxT(t), b, q)
			require.NoError(t, err)
			return len(keys) == 0 && log.handled() >= 60
		})
		log.checkInOrder(t, []string{"k"}, 60)
		for _, name := range []string{heldQueueOf(q, "k"), rerunQueueOf(q, "k")} {
			_, err := b.Transport().Inspect(ctxT(t), name)
			require.ErrorIs(t, err, transport.ErrNotFound, "%s is deleted after the release", name)
		}
	},
})

var _ = registerPair(pair{
	a: "batch", b: "kill switch",
	holds: "failing batches trip the switch (each message counted), Health says paused, the probe resumes it once the dependency is back, and every message is then handled once, none in .dlq",
	run: func(t *testing.T, url string) {
		policy := acemq.RetryPolicy{MaxAttempts: 20, Delays: []time.Duration{20 * time.Millisecond}}
		q := consumerQueue(t, url, policy)
		c := connectURL(t, url, acemq.WithRetryPolicy(policy))
		var failing atomic.Bool
		failing.Store(true)
		var mu sync.Mutex
		handled := map[string]int{}
		cons, err := acemq.NewBatchConsumer(c, q, func(_ context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
			if failing.Load() {
				acks := make([]acemq.Ack, len(batch))
				for i := range acks {
					acks[i] = acemq.Retry(errors.New("the database is down"))
				}
				return acks
			}
			mu.Lock()
			defer mu.Unlock()
			for _, m := range batch {
				handled[m.Payload.OrderID]++
			}
			return nil
		}, acemq.BatchSize(10), acemq.BatchWait(20*time.Millisecond),
			acemq.KillSwitch(acemq.KillSwitchPolicy{MinFailures: 5, Threshold: 0.5, CoolDown: 200 * time.Millisecond}))
		require.NoError(t, err)
		run(t, cons)
		sendAll(t, c, q, orders("b", 30))
		within(t, 30*time.Second, "the kill switch to trip", func() bool {
			return healthSays(c, "paused by the kill switch")
		})
		failing.Store(false)
		within(t, 30*time.Second, "every message handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == 30
		})
		mu.Lock()
		for id, n := range handled {
			require.Equal(t, 1, n, "%s handled once", id)
		}
		mu.Unlock()
		require.Empty(t, dead(t, c, q))
	},
})

var _ = registerPair(pair{
	a: "batch", b: "Close",
	holds: "a Conn closed while a batch is gathered and one is in the handler loses nothing: every message comes again to the next consumer and is handled",
	run: func(t *testing.T, url string) {
		q := consumerQueue(t, url, acemq.RetryPolicy{})
		a := connectURL(t, url)
		inHandler := make(chan struct{}, 1)
		cons, err := acemq.NewBatchConsumer(a, q, func(ctx context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
			select {
			case inHandler <- struct{}{}:
			default:
			}
			<-ctx.Done() // Close ends the handler's ctx
			return nil
		}, acemq.BatchSize(5), acemq.BatchWait(time.Hour))
		require.NoError(t, err)
		run(t, cons)
		sendAll(t, a, q, orders("c", 12))
		<-inHandler
		require.NoError(t, a.Close())

		b := connectURL(t, url)
		var mu sync.Mutex
		handled := map[string]bool{}
		cons2, err := acemq.NewBatchConsumer(b, q, func(_ context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range batch {
				handled[m.Payload.OrderID] = true
			}
			return nil
		}, acemq.BatchSize(5), acemq.BatchWait(20*time.Millisecond))
		require.NoError(t, err)
		run(t, cons2)
		within(t, 30*time.Second, "all 12 handled by the next consumer", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == 12
		})
	},
})

// ledger is a saga's state in the composition pairs: the steps applied,
// by number, and how many times each.
type ledger struct {
	Applied map[int]int `json:"applied"`
}

// sagaOn opens a SQLite outbox, inbox and saga of the test's own.
func sagaOn(t *testing.T) (*outbox.Outbox, *saga.Saga[ledger]) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	ob, err := outbox.New(db, outbox.SQLite)
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(ctxT(t)))
	in, err := outbox.NewInbox(db, outbox.SQLite)
	require.NoError(t, err)
	require.NoError(t, in.Migrate(ctxT(t)))
	s, err := saga.New[ledger](ob, "ledger", saga.WithInbox(in))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctxT(t)))
	t.Cleanup(func() { _ = s.Close(); _ = ob.Close() })
	return ob, s
}

// ledgerStep applies step m.Payload.N to the instance keyed by the step's
// key; fail, when it returns an error, fails the step.
func ledgerHandler(s *saga.Saga[ledger], fail func(*acemq.Message[Step]) error) acemq.Handler[Step] {
	return saga.Handle(s, func(m *acemq.Message[Step]) string { return m.Payload.Key },
		func(_ context.Context, in *saga.Instance[ledger], m *acemq.Message[Step]) error {
			if err := fail(m); err != nil {
				return err
			}
			if in.State.Applied == nil {
				in.State.Applied = map[int]int{}
			}
			in.State.Applied[m.Payload.N]++
			return nil
		}, saga.Starts())
}

// checkLedger checks that instance id applied steps 1…n, each once.
func checkLedger(t *testing.T, s *saga.Saga[ledger], id string, n int) {
	t.Helper()
	snap, err := s.Get(ctxT(t), id)
	require.NoError(t, err)
	for i := 1; i <= n; i++ {
		require.Equal(t, 1, snap.State.Applied[i], "saga %s applied step %d once", id, i)
	}
	require.Len(t, snap.State.Applied, n)
}

var _ = registerPair(pair{
	a: "saga", b: "ordered release",
	holds: "a saga step that failed for good blocks its key; after the release re-runs it, every step is applied exactly once, and the release's steps pass the saga's own fence check",
	run: func(t *testing.T, url string) {
		_, s := sagaOn(t)
		q := orderedQueue(t, url, 1, "o1")
		c := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		var failing atomic.Bool
		failing.Store(true)
		h := ledgerHandler(s, func(m *acemq.Message[Step]) error {
			if m.Payload.N == 3 && failing.Load() {
				return acemq.Fatal(errors.New("stock service says no"))
			}
			return nil
		})
		cons, err := acemq.NewConsumer(c, q, h, acemq.Ordered(acemq.OrderPolicy{Partitions: 1, BlockOnFailure: true}))
		require.NoError(t, err)
		run(t, cons)
		var ms []transport.Message
		for n := 1; n <= 8; n++ {
			ms = append(ms, keyed(t, q, Step{Key: "o1", N: n}))
		}
		publishAll(t, c, ms)
		within(t, 30*time.Second, "o1 blocked at step 3", func() bool {
			keys, err := acemq.BlockedKeys(ctxT(t), c, q)
			require.NoError(t, err)
			return len(keys) == 1 && keys[0].Held == 5
		})
		failing.Store(false)
		require.NoError(t, acemq.ReleaseKey(ctxT(t), c, q, "o1", acemq.RerunFailed()))
		within(t, 30*time.Second, "the saga applied all 8 steps", func() bool {
			snap, err := s.Get(ctxT(t), "o1")
			return err == nil && len(snap.State.Applied) == 8
		})
		checkLedger(t, s, "o1", 8)
	},
})

var _ = registerPair(pair{
	a: "saga", b: "fencing",
	holds: "when the holder's Conn goes mid-run, the next holder's steps pass the saga's fence check and every step of every instance is applied exactly once",
	run: func(t *testing.T, url string) {
		_, s := sagaOn(t)
		q := orderedQueue(t, url, 2)
		h := ledgerHandler(s, func(*acemq.Message[Step]) error { return nil })
		start := func(c *acemq.Conn) {
			cons, err := acemq.NewConsumer(c, q, h, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}), acemq.Concurrency(4))
			require.NoError(t, err)
			run(t, cons)
		}
		keys := []string{"o1", "o2", "o3", "o4"}
		send := func(c *acemq.Conn, from, to int) {
			var ms []transport.Message
			for n := from; n <= to; n++ {
				for _, k := range keys {
					ms = append(ms, keyed(t, q, Step{Key: k, N: n}))
				}
			}
			publishAll(t, c, ms)
		}
		a := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		start(a)
		send(a, 1, 5)
		b := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		start(b)
		require.NoError(t, a.Close())
		send(b, 6, 10)
		within(t, 60*time.Second, "every instance applied 10 steps", func() bool {
			for _, k := range keys {
				snap, err := s.Get(ctxT(t), k)
				if err != nil || len(snap.State.Applied) < 10 {
					return false
				}
			}
			return true
		})
		for _, k := range keys {
			checkLedger(t, s, k, 10)
		}
	},
})

var _ = registerPair(pair{
	a: "outbox", b: "ordered key",
	holds: "messages written through the outbox with a key reach their key's partition and are handled in the order they were written, across a relay that stops and a new one that starts",
	run: func(t *testing.T, url string) {
		ob, _ := sagaOn(t)
		q := orderedQueue(t, url, 2)
		c := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		log := newOrderLog()
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			log.start(m.Payload)(true)
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}), acemq.Concurrency(4))
		require.NoError(t, err)
		run(t, cons)
		pub := outbox.NewPublisher[Step](ob, c, q, "", acemq.KeyBy(func(s Step) string { return s.Key }))
		keys := []string{"a", "b", "c"}
		write := func(from, to int) {
			for n := from; n <= to; n++ {
				for _, k := range keys {
					tx, err := ob.DB().BeginTx(ctxT(t), nil)
					require.NoError(t, err)
					require.NoError(t, pub.Send(ctxT(t), tx, Step{Key: k, N: n}))
					require.NoError(t, tx.Commit())
				}
			}
		}
		relay := func() context.CancelFunc {
			ctx, cancel := context.WithCancel(context.Background())
			r := outbox.NewRelay(ob, c, outbox.PollInterval(10*time.Millisecond))
			done := make(chan struct{})
			go func() { defer close(done); _ = r.Run(ctx) }()
			return func() { cancel(); <-done }
		}
		write(1, 10)
		stop := relay()
		within(t, 30*time.Second, "the first rows relayed and handled", func() bool { return log.handled() >= 15 })
		stop()
		write(11, 20)
		stop = relay()
		defer stop()
		within(t, 30*time.Second, "every row handled", func() bool { return log.handled() >= 60 })
		log.checkInOrder(t, keys, 20)
	},
})

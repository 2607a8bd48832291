package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
	"github.com/stretchr/testify/require"
)

// fenceSeen is what an ordered handler saw of its deliveries' partitions
// and fences.
type fenceSeen struct {
	mu      sync.Mutex
	byKey   map[string]int  // key -> partition
	byPart  map[int]uint64  // partition -> fence of its first delivery
	fences  map[uint64]bool // every fence seen
	handled map[string]bool // key/n
	bad     []string
}

func newFenceSeen() *fenceSeen {
	return &fenceSeen{byKey: map[string]int{}, byPart: map[int]uint64{}, fences: map[uint64]bool{}, handled: map[string]bool{}}
}

func (f *fenceSeen) see(m *acemq.Message[Step], partitions int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, fence := m.Partition(), m.Fence()
	if p < 0 || p >= partitions {
		f.bad = append(f.bad, fmt.Sprintf("%s/%d: Partition() = %d, outside 0..%d", m.Payload.Key, m.Payload.N, p, partitions-1))
	}
	if fence == 0 {
		f.bad = append(f.bad, fmt.Sprintf("%s/%d: Fence() = 0", m.Payload.Key, m.Payload.N))
	}
	if q, ok := f.byKey[m.Payload.Key]; ok && q != p {
		f.bad = append(f.bad, fmt.Sprintf("key %s came from partitions %d and %d", m.Payload.Key, q, p))
	}
	f.byKey[m.Payload.Key] = p
	if g, ok := f.byPart[p]; ok && g != fence {
		f.bad = append(f.bad, fmt.Sprintf("partition %d: fences %d and %d under one holder", p, g, fence))
	}
	f.byPart[p] = fence
	f.fences[fence] = true
	f.handled[fmt.Sprintf("%s/%d", m.Payload.Key, m.Payload.N)] = true
}

func (f *fenceSeen) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.handled)
}

// Every delivery of an ordered consumer carries the partition it came from
// (one per key, one the consumer holds) and its holder's non-zero fence,
// the same for every delivery of a partition while one instance holds it;
// a plain consumer's deliveries carry Partition -1 and Fence 0.
func TestOrderedFenceAndPartition(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		const parts, per = 4, 3
		q := orderedQueue(t, url, parts)
		c := connectURL(t, url)
		seen := newFenceSeen()
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			seen.see(m, parts)
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{Partitions: parts}), acemq.Concurrency(4))
		require.NoError(t, err)
		run(t, cons)
		// The hash ring gives each partition one point, so one may own a
		// small arc: send rounds of new keys until every partition has
		// delivered (20 keys a round, at most 50 rounds).
		keys := 0
		for round := 0; round < 50; round++ {
			var ms []transport.Message
			for n := 1; n <= per; n++ {
				for k := keys; k < keys+20; k++ {
					ms = append(ms, keyed(t, q, Step{Key: fmt.Sprintf("k%04d", k), N: n}))
				}
			}
			keys += 20
			publishAll(t, c, ms)
			within(t, time.Minute, "every message handled", func() bool { return seen.count() == keys*per })
			seen.mu.Lock()
			all := len(seen.byPart) == parts
			seen.mu.Unlock()
			if all {
				break
			}
		}
		seen.mu.Lock()
		defer seen.mu.Unlock()
		require.Empty(t, seen.bad)
		require.Len(t, seen.byPart, parts, "every partition delivered (%d keys over %d)", keys, parts)
		require.Len(t, seen.fences, parts, "one fence per partition taken, each new")

		plain := consumerQueue(t, url, acemq.RetryPolicy{})
		got := make(chan [2]int64, 1)
		pc, err := acemq.NewConsumer(c, plain, func(_ context.Context, m *acemq.Message[string]) acemq.Ack {
			got <- [2]int64{int64(m.Partition()), int64(m.Fence())}
			return acemq.Done()
		})
		require.NoError(t, err)
		run(t, pc)
		require.NoError(t, acemq.NewPublisher[string](c, "", plain).Send(ctxT(t), "x"))
		select {
		case g := <-got:
			require.Equal(t, [2]int64{-1, 0}, g, "a plain consumer's Partition and Fence")
		case <-time.After(30 * time.Second):
			t.Fatal("the plain consumer got nothing")
		}
	})
}

// When the instance holding the partitions goes (its Conn closed), the
// next one's deliveries carry fences above every fence the first one had.
func TestOrderedFenceGrowsAcrossHandOver(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		const parts = 2
		q := orderedQueue(t, url, parts)
		pubConn := connectURL(t, url)
		handler := func(seen *fenceSeen) acemq.Handler[Step] {
			return func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
				seen.see(m, parts)
				return acemq.Done()
			}
		}
		batch := func(from int) []transport.Message {
			var ms []transport.Message
			for k := range 8 {
				ms = append(ms, keyed(t, q, Step{Key: fmt.Sprintf("k%d", k), N: from}))
			}
			return ms
		}

		first, second := newFenceSeen(), newFenceSeen()
		a, err := acemq.Connect(ctxT(t), url)
		require.NoError(t, err)
		ca, err := acemq.NewConsumer(a, q, handler(first), acemq.Ordered(acemq.OrderPolicy{Partitions: parts}))
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- ca.Run(context.Background()) }()
		publishAll(t, pubConn, batch(1))
		within(t, time.Minute, "the first instance handled its messages", func() bool { return first.count() == 8 })
		require.NoError(t, a.Close())
		<-done

		b := connectURL(t, url)
		cb, err := acemq.NewConsumer(b, q, handler(second), acemq.Ordered(acemq.OrderPolicy{Partitions: parts}))
		require.NoError(t, err)
		run(t, cb)
		publishAll(t, pubConn, batch(2))
		within(t, time.Minute, "the second instance handled its messages", func() bool { return second.count() == 8 })

		first.mu.Lock()
		second.mu.Lock()
		defer first.mu.Unlock()
		defer second.mu.Unlock()
		require.Empty(t, first.bad)
		require.Empty(t, second.bad)
		var top uint64
		for f := range first.fences {
			top = max(top, f)
		}
		for p, f := range second.byPart {
			require.Greater(t, f, top, "partition %d's fence after the hand-over", p)
		}
	})
}

// livenessMemory is a memory transport with a Liveness the test sets, and
// leases the test can end.
type livenessMemory struct {
	*memory.Transport
	silent  atomic.Bool
	mu      sync.Mutex
	leases  []*testLease
	timeout time.Duration
	refuse  atomic.Int64 // Fence fails while above 0, counting down
}

func (l *livenessMemory) Fence(ctx context.Context, name string) (uint64, error) {
	if l.refuse.Add(-1) >= 0 {
		return 0, errors.New("memory: the test refuses this fence")
	}
	return l.Transport.Fence(ctx, name)
}

func (l *livenessMemory) LastHeard() time.Time {
	if l.silent.Load() {
		return time.Now().Add(-time.Hour)
	}
	return time.Now()
}

func (l *livenessMemory) Timeout() time.Duration { return l.timeout }

func (l *livenessMemory) Lease(ctx context.Context, name string) (transport.Lease, error) {
	in, err := l.Transport.Lease(ctx, name)
	if err != nil {
		return nil, err
	}
	tl := &testLease{Lease: in, lost: make(chan struct{})}
	l.mu.Lock()
	l.leases = append(l.leases, tl)
	l.mu.Unlock()
	return tl, nil
}

// loseLeases ends every lease taken so far as a lost connection does.
func (l *livenessMemory) loseLeases() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, tl := range l.leases {
		tl.once.Do(func() { close(tl.lost) })
		_ = tl.Lease.Release(context.Background())
	}
}

type testLease struct {
	transport.Lease
	once sync.Once
	lost chan struct{}
}

func (t *testLease) Lost() <-chan struct{} {
	select {
	case <-t.Lease.Lost():
		t.once.Do(func() { close(t.lost) })
	default:
	}
	return t.lost
}

func (t *testLease) Release(ctx context.Context) error {
	t.once.Do(func() { close(t.lost) })
	return t.Lease.Release(ctx)
}

// A running handler's ctx is cancelled, with a cause saying the partition
// was lost, when the broker has not been heard within the heartbeat
// timeout (the watchdog) and when the instance's slot lease is lost; the
// delivery goes back unsettled (nothing in .dlq), and comes again.
func TestOrderedLossCancelsHandler(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"silence", "lease"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			url := acemqtest.Memory(t)
			q := orderedQueue(t, url, 1)
			lt := &livenessMemory{Transport: memory.New(strings.TrimPrefix(url, "memory://")), timeout: 200 * time.Millisecond}
			got, opt := newSettlements()
			c := connectURL(t, url, acemq.WithTransport(lt), opt)
			started := make(chan struct{}, 4)
			cancelled := make(chan error, 4)
			var calls atomic.Int64
			cons, err := acemq.NewConsumer(c, q, func(ctx context.Context, m *acemq.Message[Step]) acemq.Ack {
				if calls.Add(1) > 1 {
					return acemq.Done()
				}
				started <- struct{}{}
				select {
				case <-ctx.Done():
					cancelled <- context.Cause(ctx)
				case <-time.After(20 * time.Second):
					cancelled <- nil
				}
				return acemq.Reject(errors.New("would dead-letter it if the loss did not win"))
			}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1}))
			require.NoError(t, err)
			run(t, cons)
			publishAll(t, c, []transport.Message{keyed(t, q, Step{Key: "k", N: 1})})
			<-started
			switch how {
			case "silence":
				lt.silent.Store(true)
			case "lease":
				lt.loseLeases()
			}
			cause := <-cancelled
			require.ErrorIs(t, cause, acemq.ErrPartitionLost, "the handler's ctx cause")
			lt.silent.Store(false)
			// The lost attempt settles unsettled (no OnSettled hook); the
			// settlement heard is the next attempt's.
			s := got.next(t)
			require.Equal(t, acemq.OutcomeAcked, s.Outcome, "the settlement after the loss: %s", s.Reason)
			require.EqualValues(t, 2, calls.Load(), "the delivery came again")
			empty(t, c, acemq.DeadLetterQueue(q))
		})
	}
}

// A handler that returns Retry wrapping ErrPartitionLost (its store
// refused a stale fence) has its delivery given back, not retried in
// place or moved; the partition is subscribed again with a greater fence
// and the delivery handled under it.
func TestOrderedHandlerSaysPartitionLost(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := orderedQueue(t, url, 1)
		got, opt := newSettlements()
		c := connectURL(t, url, opt)
		var mu sync.Mutex
		var fences []uint64
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			mu.Lock()
			fences = append(fences, m.Fence())
			n := len(fences)
			mu.Unlock()
			if n == 1 {
				return acemq.Retry(fmt.Errorf("the store has a newer fence: %w", acemq.ErrPartitionLost))
			}
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1}))
		require.NoError(t, err)
		run(t, cons)
		publishAll(t, c, []transport.Message{keyed(t, q, Step{Key: "k", N: 1})})
		s := got.next(t)
		require.Equal(t, acemq.OutcomeAcked, s.Outcome, s.Reason)
		require.Equal(t, 1, s.Attempt, "given back, not retried in place")
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, fences, 2)
		require.Greater(t, fences[1], fences[0], "the fence after the partition was taken again")
		empty(t, c, acemq.DeadLetterQueue(q))
	})
}

// A fence that cannot be taken stops the partition's deliveries from
// being handled: they go back, the subscription is tried again, and they
// are handled once a fence is taken, carrying it.
func TestOrderedNoFenceNoHandler(t *testing.T) {
	t.Parallel()
	url := acemqtest.Memory(t)
	q := orderedQueue(t, url, 1)
	lt := &livenessMemory{Transport: memory.New(strings.TrimPrefix(url, "memory://"))}
	lt.refuse.Store(3)
	c := connectURL(t, url, acemq.WithTransport(lt))
	var mu sync.Mutex
	var fences []uint64
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		mu.Lock()
		defer mu.Unlock()
		fences = append(fences, m.Fence())
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1}))
	require.NoError(t, err)
	run(t, cons)
	publishAll(t, c, []transport.Message{keyed(t, q, Step{Key: "k", N: 1}), keyed(t, q, Step{Key: "k", N: 2})})
	within(t, 30*time.Second, "both handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(fences) == 2
	})
	require.LessOrEqual(t, lt.refuse.Load(), int64(0), "every refusal was met")
	mu.Lock()
	defer mu.Unlock()
	require.NotZero(t, fences[0])
	require.Equal(t, fences[0], fences[1])
}

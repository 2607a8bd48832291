package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// inPlace is a retry policy short enough for the ordering tests.
var inPlace = acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{20 * time.Millisecond}}

// TestOrderedKeepsOrderPerKey: 300 keys × 50 numbered messages published
// interleaved, Concurrency 8, 5% of first attempts retried in place: per key
// the numbers never go back and none is missing, no two handlers of a key
// overlap, and different keys run at once.
func TestOrderedKeepsOrderPerKey(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		const keys, per = 300, 50
		q := orderedQueue(t, url, 16)
		c := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		log := newOrderLog()
		var retried atomic.Int64
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			end := log.start(m.Payload)
			if m.Envelope.Attempt == 1 && retriedFirst(m.Payload.Key, m.Payload.N) {
				end(false)
				retried.Add(1)
				return acemq.Retry(errors.New("not yet"))
			}
			time.Sleep(50 * time.Microsecond)
			end(true)
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{}), acemq.Concurrency(8))
		require.NoError(t, err)

		names := make([]string, keys)
		for i := range names {
			names[i] = fmt.Sprintf("order-%03d", i)
		}
		ms := make([]transport.Message, 0, keys*per)
		for n := 1; n <= per; n++ {
			for _, k := range names {
				ms = append(ms, keyed(t, q, Step{Key: k, N: n}))
			}
		}
		run(t, cons)
		start := time.Now()
		publishAll(t, c, ms)
		within(t, 3*time.Minute, "every message handled", func() bool { return log.handled() == keys*per })
		t.Logf("%d messages, %d retried in place, in %v; at most %d handlers at once", keys*per, retried.Load(), time.Since(start).Round(time.Millisecond), log.peak)
		log.check(t, names, per)
		require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, cons.Partitions())
	})
}

// TestOrderedRetriesInPlace: a message that asks for retries holds its key
// (the key's next messages wait, in order) while another key goes on, and
// each attempt settles as for any consumer, with its attempt and delay.
func TestOrderedRetriesInPlace(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := orderedQueue(t, url, 2)
		got, opt := newSettlements()
		policy := acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{150 * time.Millisecond}}
		c := connectURL(t, url, acemq.WithRetryPolicy(policy), opt)
		var mu sync.Mutex
		var order []string
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			mu.Lock()
			order = append(order, fmt.Sprintf("%s%d/%d", m.Payload.Key, m.Payload.N, m.Envelope.Attempt))
			mu.Unlock()
			if m.Payload.Key == "k" && m.Payload.N == 1 && m.Envelope.Attempt < 3 {
				return acemq.Retry(errors.New("later"))
			}
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}), acemq.Concurrency(4))
		require.NoError(t, err)
		run(t, cons)
		var ms []transport.Message
		for n := 1; n <= 3; n++ {
			ms = append(ms, keyed(t, q, Step{Key: "k", N: n}), keyed(t, q, Step{Key: "other", N: n}))
		}
		publishAll(t, c, ms)

		var ks []acemq.Settlement
		for range 8 {
			ks = append(ks, got.next(t))
		}
		got.none(t)
		mu.Lock()
		defer mu.Unlock()
		var mine, others []string
		for _, o := range order {
			if strings.HasPrefix(o, "k") {
				mine = append(mine, o)
			} else {
				others = append(others, o)
			}
		}
		require.Equal(t, []string{"k1/1", "k1/2", "k1/3", "k2/1", "k3/1"}, mine)
		require.Equal(t, []string{"other1/1", "other2/1", "other3/1"}, others)
		// The other key did not wait for k's retries.
		require.Less(t, slices.Index(order, "other3/1"), slices.Index(order, "k1/2"), "order %v", order)
		var retries []acemq.Settlement
		for _, s := range ks {
			if s.Outcome == acemq.OutcomeRetried {
				retries = append(retries, s)
			}
		}
		require.Len(t, retries, 2)
		assert.Equal(t, 1, retries[0].Attempt)
		assert.Equal(t, 2, retries[1].Attempt)
		assert.Equal(t, 150*time.Millisecond, retries[0].Delay)
	})
}

// TestOrderedBlockedKey: with BlockOnFailure a message that fails for good
// goes to .dlq and blocks its key: the key's later messages are held (not
// handled), other keys complete, BlockedKeys shows it with its held count,
// and ReleaseKey runs the held ones in order before anything newer.
func TestOrderedBlockedKey(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := orderedQueue(t, url, 4, "bad")
		c := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		var mu sync.Mutex
		seen := map[string][]int{}
		var failing atomic.Bool
		failing.Store(true)
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			mu.Lock()
			seen[m.Payload.Key] = append(seen[m.Payload.Key], m.Payload.N)
			mu.Unlock()
			if m.Payload.Key == "bad" && m.Payload.N == 3 && failing.Load() {
				return acemq.Reject(errors.New("the order is broken"))
			}
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{Partitions: 4, BlockOnFailure: true}), acemq.Concurrency(4))
		require.NoError(t, err)
		run(t, cons)
		var ms []transport.Message
		for n := 1; n <= 10; n++ {
			for _, k := range []string{"bad", "good", "fine"} {
				ms = append(ms, keyed(t, q, Step{Key: k, N: n}))
			}
		}
		publishAll(t, c, ms)
		count := func(k string) int {
			mu.Lock()
			defer mu.Unlock()
			return len(seen[k])
		}
		within(t, 30*time.Second, "the good keys done", func() bool { return count("good") == 10 && count("fine") == 10 })
		var blocked []acemq.BlockedKey
		within(t, 30*time.Second, "bad blocked with 7 held", func() bool {
			blocked, err = acemq.BlockedKeys(ctxT(t), c, q)
			require.NoError(t, err)
			return len(blocked) == 1 && blocked[0].Held == 7
		})
		require.Equal(t, "bad", blocked[0].Key)
		require.Contains(t, blocked[0].Reason, "the order is broken")
		require.WithinDuration(t, time.Now(), blocked[0].Since, time.Minute)
		dead := take(t, c, acemq.DeadLetterQueue(q))
		require.Equal(t, blocked[0].MessageID, dead.MessageID)
		require.Equal(t, []int{1, 2, 3}, seen["bad"], "nothing after the failure ran")

		err = acemq.ReleaseKey(ctxT(t), c, q, "fine")
		require.ErrorContains(t, err, `key "fine" of queue`)
		require.ErrorContains(t, err, "is not blocked")

		failing.Store(false)
		require.NoError(t, acemq.ReleaseKey(ctxT(t), c, q, "bad"))
		publishAll(t, c, []transport.Message{keyed(t, q, Step{Key: "bad", N: 11})})
		within(t, 30*time.Second, "bad released", func() bool { return count("bad") == 11 })
		require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, seen["bad"])
		within(t, 10*time.Second, "the registry empty", func() bool {
			blocked, err = acemq.BlockedKeys(ctxT(t), c, q)
			require.NoError(t, err)
			return len(blocked) == 0
		})
		_, err = c.Transport().Inspect(ctxT(t), heldQueueOf(q, "bad"))
		require.ErrorIs(t, err, transport.ErrNotFound, "the held queue is deleted after the release")
	})
}

// TestOrderedBlockedSurvivesRestart: a blocked key stays blocked across a
// consumer that stops and a new one (a new Conn) that takes its place: the
// new holder reads the registry before it handles anything of the
// partition.
func TestOrderedBlockedSurvivesRestart(t *testing.T) {
	t.Parallel()
	url := acemqtest.Memory(t)
	q := orderedQueue(t, url, 1, "x")
	c1 := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
	var seen1 []int
	cons1, err := acemq.NewConsumer(c1, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		seen1 = append(seen1, m.Payload.N)
		if m.Payload.N == 1 {
			return acemq.Reject(errors.New("no"))
		}
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1, BlockOnFailure: true}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons1.Run(ctx) }()
	publishAll(t, c1, []transport.Message{keyed(t, q, Step{Key: "x", N: 1}), keyed(t, q, Step{Key: "x", N: 2})})
	within(t, 30*time.Second, "x blocked, 2 held", func() bool {
		b, err := acemq.BlockedKeys(ctxT(t), c1, q)
		require.NoError(t, err)
		return len(b) == 1 && b[0].Held == 1
	})
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, c1.Close())

	c2 := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
	var mu sync.Mutex
	var seen2 []int
	cons2, err := acemq.NewConsumer(c2, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		mu.Lock()
		seen2 = append(seen2, m.Payload.N)
		mu.Unlock()
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1, BlockOnFailure: true}))
	require.NoError(t, err)
	run(t, cons2)
	publishAll(t, c2, []transport.Message{keyed(t, q, Step{Key: "x", N: 3})})
	within(t, 30*time.Second, "3 held too", func() bool {
		b, err := acemq.BlockedKeys(ctxT(t), c2, q)
		require.NoError(t, err)
		return len(b) == 1 && b[0].Held == 2
	})
	mu.Lock()
	require.Empty(t, seen2, "the new holder handled a message of a blocked key")
	mu.Unlock()
	require.NoError(t, acemq.ReleaseKey(ctxT(t), c2, q, "x"))
	within(t, 30*time.Second, "released", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen2) == 2
	})
	require.Equal(t, []int{2, 3}, seen2)
}

// TestOrderedPartitionsSpread: three Conns running the consumer share the
// partitions: disjoint, covering all, 2/2/2 of 6.
func TestOrderedPartitionsSpread(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := orderedQueue(t, url, 6)
		var conss []*acemq.Consumer[Step]
		for range 3 {
			c := connectURL(t, url)
			cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() },
				acemq.Ordered(acemq.OrderPolicy{Partitions: 6}))
			require.NoError(t, err)
			require.Empty(t, cons.Partitions(), "no partitions before Run")
			run(t, cons)
			conss = append(conss, cons)
		}
		within(t, 30*time.Second, "2/2/2", func() bool {
			var all []int
			for _, c := range conss {
				p := c.Partitions()
				if len(p) != 2 {
					return false
				}
				all = append(all, p...)
			}
			slices.Sort(all)
			return slices.Equal(all, []int{0, 1, 2, 3, 4, 5})
		})
	})
}

// TestOrderedPartitionCountIsFixed: declaring the queue again with another
// partition count fails, naming the count the broker has.
func TestOrderedPartitionCountIsFixed(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := orderedQueue(t, url, 8)
		c := connectURL(t, url)
		h := func(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() }
		_, err := acemq.NewConsumer(c, q, h, acemq.Ordered(acemq.OrderPolicy{Partitions: 4}))
		require.NoError(t, err)
		_, err = acemq.NewConsumer(c, q, h, acemq.Ordered(acemq.OrderPolicy{Partitions: 4}))
		require.NoError(t, err, "the same count again is fine")
		for _, p := range []int{2, 8} {
			_, err = acemq.NewConsumer(c, q, h, acemq.Ordered(acemq.OrderPolicy{Partitions: p}))
			require.ErrorContains(t, err, fmt.Sprintf("asks for %d partitions, but the queue was declared with 4", p))
			require.Equal(t, 1, countPrefix(err.Error()))
		}
		r := acemq.NewRouter(c, q, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}))
		acemq.Route(r, h)
		require.ErrorContains(t, r.Run(context.Background()), "declared with 4")
	})
}

// TestOrderedOptionErrors: bad policies fail NewConsumer saying why; the
// retry policy must fit in the broker's delivery timeout.
func TestOrderedOptionErrors(t *testing.T) {
	t.Parallel()
	c := connect(t)
	h := func(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() }
	for _, tc := range []struct {
		name string
		opts []acemq.ConsumerOption
		want string
	}{
		{"negative", []acemq.ConsumerOption{acemq.Ordered(acemq.OrderPolicy{Partitions: -1})}, "OrderPolicy.Partitions is -1, want 1 to 1024"},
		{"too many", []acemq.ConsumerOption{acemq.Ordered(acemq.OrderPolicy{Partitions: 5000})}, "OrderPolicy.Partitions is 5000"},
		{"delivery timeout", []acemq.ConsumerOption{acemq.Ordered(acemq.OrderPolicy{}),
			acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 5, Delays: []time.Duration{5 * time.Minute}})},
			"waits 20m0s in all; retries happen in place, holding the delivery unacked, so the total must stay under RabbitMQ's delivery timeout of 15m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := acemq.NewConsumer(c, acemqtestQueue(t), h, tc.opts...)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, 1, countPrefix(err.Error()), err.Error())
		})
	}
	_, err := acemq.NewConsumer(c, acemqtestQueue(t), h, acemq.Ordered(acemq.OrderPolicy{}),
		acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 4, Delays: []time.Duration{5 * time.Minute}}))
	require.NoError(t, err, "15 minutes in all is within the timeout")
}

// TestOrderedNoDeclare: with NoDeclare, Run checks the ordered topology and
// names what is missing.
func TestOrderedNoDeclare(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := acemqtestQueue(t)
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() },
		acemq.Ordered(acemq.OrderPolicy{Partitions: 2}), acemq.NoDeclare())
	require.NoError(t, err)
	err = cons.Run(ctxT(t))
	require.ErrorContains(t, err, "these queues do not exist: "+q+".p0, "+q+".p1, "+q+".dlq")

	_, err = acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() },
		acemq.Ordered(acemq.OrderPolicy{Partitions: 2}))
	require.NoError(t, err)
	require.NoError(t, runFor(cons, 200*time.Millisecond), "declared, NoDeclare runs")
}

// runFor runs r for d and returns what Run returned.
func runFor(r runner, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return r.Run(ctx)
}

// TestOrderedPluginMissing: a broker that does not know the exchange type
// fails NewConsumer with the plugin's name and the command to enable it.
func TestOrderedPluginMissing(t *testing.T) {
	t.Parallel()
	mem, err := acemq.Connect(ctxT(t), acemqtest.Memory(t))
	require.NoError(t, err)
	tr := noHashExchange{mem.Transport()}
	c, err := acemq.Connect(ctxT(t), "memory://", acemq.WithTransport(tr), acemq.WithLogger(quiet))
	require.NoError(t, err)
	defer c.Close()
	_, err = acemq.NewConsumer(c, acemqtestQueue(t), func(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() },
		acemq.Ordered(acemq.OrderPolicy{}))
	require.ErrorContains(t, err, "rabbitmq-plugins enable rabbitmq_consistent_hash_exchange")
	require.ErrorContains(t, err, "invalid exchange type")
}

// noHashExchange answers an x-consistent-hash declaration as the RabbitMQ
// transport does for a broker without the plugin: with the broker's words
// and transport.ErrMissingPlugin.
type noHashExchange struct{ transport.Transport }

func (n noHashExchange) Declare(ctx context.Context, ts ...transport.Topology) error {
	for _, t := range ts {
		if x, ok := t.(transport.Exchange); ok && x.Kind == "x-consistent-hash" {
			return fmt.Errorf("acemq: declaring exchange %q: Exception (503) Reason: \"COMMAND_INVALID - invalid exchange type 'x-consistent-hash'\": %w", x.Name, transport.ErrMissingPlugin)
		}
	}
	return n.Transport.Declare(ctx, ts...)
}

func (n noHashExchange) Lease(ctx context.Context, name string) (transport.Lease, error) {
	return n.Transport.(transport.Leaser).Lease(ctx, name)
}

func (n noHashExchange) ConsumeHandOver(ctx context.Context, queue string, prefetch int, handle func(transport.Delivery)) error {
	return n.Transport.(transport.HandOverConsumer).ConsumeHandOver(ctx, queue, prefetch, handle)
}

// TestOrderedPauseAndKeyless: Pause stops the partitions (the key's
// messages wait, in order) and Resume goes on; with AllowKeyless, keyless
// messages are handled too, without a lane (TestOrderedKeylessParked has
// the default, which parks them).
func TestOrderedPauseAndKeyless(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := acemqtestQueue(t)
	var mu sync.Mutex
	var seen []string
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s%d", m.Payload.Key, m.Payload.N))
		mu.Unlock()
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 3, AllowKeyless: true}), acemq.Concurrency(3))
	require.NoError(t, err)
	run(t, cons)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	publishAll(t, c, []transport.Message{keyed(t, q, Step{Key: "a", N: 1})})
	within(t, 10*time.Second, "a1", func() bool { return count() == 1 })
	cons.Pause()
	within(t, 10*time.Second, "no partitions while paused", func() bool { return len(cons.Partitions()) == 0 })
	var ms []transport.Message
	for n := 2; n <= 5; n++ {
		ms = append(ms, keyed(t, q, Step{Key: "a", N: n}))
	}
	loose := keyed(t, q, Step{N: 99})
	delete(loose.Headers, "x-acemq-key")
	ms = append(ms, loose)
	publishAll(t, c, ms)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, count(), "nothing handled while paused")
	cons.Resume()
	within(t, 30*time.Second, "the rest", func() bool { return count() == 6 })
	mu.Lock()
	defer mu.Unlock()
	var a []string
	for _, s := range seen {
		if s != "99" {
			a = append(a, s)
		}
	}
	require.Equal(t, []string{"a1", "a2", "a3", "a4", "a5"}, a)
	require.Contains(t, seen, "99")
}

// TestOrderedBlockedKeysGauge: acemq.consumer.blocked_keys counts the keys
// blocked in the partitions the instance holds, and drops after a release.
func TestOrderedBlockedKeysGauge(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	c := connect(t, acemq.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), acemq.WithRetryPolicy(inPlace))
	q := acemqtestQueue(t)
	var failing atomic.Bool
	failing.Store(true)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		if failing.Load() && m.Payload.N == 1 {
			return acemq.Reject(errors.New("no"))
		}
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2, BlockOnFailure: true}))
	require.NoError(t, err)
	run(t, cons)
	gauge := func() int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "acemq.consumer.blocked_keys" {
					for _, p := range g.DataPoints {
						if v, _ := p.Attributes.Value("messaging.destination.name"); v.AsString() == q {
							return p.Value
						}
					}
				}
			}
		}
		return -1
	}
	within(t, 10*time.Second, "the gauge at 0 while running", func() bool { return gauge() == 0 })
	publishAll(t, c, []transport.Message{keyed(t, q, Step{Key: "a", N: 1}), keyed(t, q, Step{Key: "b", N: 1})})
	within(t, 10*time.Second, "two keys blocked", func() bool { return gauge() == 2 })
	failing.Store(false)
	require.NoError(t, acemq.ReleaseKey(ctxT(t), c, q, "a"))
	within(t, 10*time.Second, "one key blocked", func() bool { return gauge() == 1 })
	require.NoError(t, c.Health(ctxT(t)), "blocked keys leave Health nil")
}

// TestOrderedRouter: a Router takes Ordered too, and reports its
// partitions.
func TestOrderedRouter(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := acemqtestQueue(t)
	r := acemq.NewRouter(c, q, acemq.Ordered(acemq.OrderPolicy{Partitions: 3}), acemq.Concurrency(4))
	var mu sync.Mutex
	var seen []int
	acemq.Route(r, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, m.Payload.N)
		return acemq.Done()
	})
	require.Empty(t, r.Partitions())
	run(t, r)
	var ms []transport.Message
	for n := 1; n <= 20; n++ {
		ms = append(ms, keyed(t, q, Step{Key: "k", N: n}))
	}
	publishAll(t, c, ms)
	within(t, 10*time.Second, "20 handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 20 })
	require.True(t, slices.IsSorted(seen), "%v", seen)
	within(t, 10*time.Second, "all partitions", func() bool { return slices.Equal(r.Partitions(), []int{0, 1, 2}) })
}

// TestOrderedShutdown: Shutdown lets the running handler settle and gives
// the deliveries not started back to their partition, in order: a new
// consumer handles them next.
func TestOrderedShutdown(t *testing.T) {
	t.Parallel()
	url := acemqtest.Memory(t)
	c := connectURL(t, url)
	q := acemqtestQueue(t)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var settled atomic.Int64
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		once.Do(func() { close(started) })
		<-release
		settled.Add(1)
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1}))
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(context.Background()) }()
	var ms []transport.Message
	for n := 1; n <= 5; n++ {
		ms = append(ms, keyed(t, q, Step{Key: "k", N: n}))
	}
	publishAll(t, c, ms)
	<-started
	shut := make(chan error, 1)
	go func() { shut <- c.Shutdown(ctxT(t)) }()
	time.Sleep(50 * time.Millisecond)
	close(release)
	require.NoError(t, <-shut)
	require.ErrorIs(t, <-ran, acemq.ErrClosed)
	require.EqualValues(t, 1, settled.Load(), "only the running handler settled")

	c2 := connectURL(t, url)
	var mu sync.Mutex
	var seen []int
	cons2, err := acemq.NewConsumer(c2, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, m.Payload.N)
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1}))
	require.NoError(t, err)
	run(t, cons2)
	within(t, 10*time.Second, "the rest", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 4 })
	require.Equal(t, []int{2, 3, 4, 5}, seen)
}

// TestOrderedKillSwitch: failures in place trip the kill switch as for any
// consumer; Health says so, and Resume takes deliveries again.
func TestOrderedKillSwitch(t *testing.T) {
	t.Parallel()
	c := connect(t, acemq.WithRetryPolicy(acemq.RetryPolicy{MaxAttempts: 2, Delays: []time.Duration{time.Millisecond}}))
	q := acemqtestQueue(t)
	var failing atomic.Bool
	failing.Store(true)
	var handled atomic.Int64
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		if failing.Load() {
			return acemq.Retry(errors.New("the database is down"))
		}
		handled.Add(1)
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}), acemq.Concurrency(4),
		acemq.KillSwitch(acemq.KillSwitchPolicy{MinFailures: 3, CoolDown: time.Hour}))
	require.NoError(t, err)
	run(t, cons)
	var ms []transport.Message
	for n := 1; n <= 20; n++ {
		ms = append(ms, keyed(t, q, Step{Key: fmt.Sprintf("k%d", n%5), N: n}))
	}
	publishAll(t, c, ms)
	within(t, 10*time.Second, "the kill switch tripped", func() bool {
		err := c.Health(ctxT(t))
		return err != nil && strings.Contains(err.Error(), "paused by the kill switch")
	})
	failing.Store(false)
	cons.Resume()
	deadLettered := 0
	within(t, 10*time.Second, "every message handled or dead-lettered", func() bool {
		deadLettered += len(dead(t, c, q))
		return handled.Load()+int64(deadLettered) == 20
	})
	require.NoError(t, c.Health(ctxT(t)))
}

// dead drains q's dead-letter queue so far and returns what it held.
func dead(t *testing.T, c *acemq.Conn, q string) []transport.Delivery {
	var out []transport.Delivery
	for {
		d, ok, err := c.Transport().Get(ctxT(t), acemq.DeadLetterQueue(q))
		require.NoError(t, err)
		if !ok {
			return out
		}
		require.NoError(t, d.Ack())
		out = append(out, d)
	}
}

// TestOrderedBind: with Ordered, Bind binds the consumer's exchange to the
// upstream one, so what is published there reaches the partitions.
func TestOrderedBind(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := orderedQueue(t, url, 2)
		c := connectURL(t, url)
		up := q + ".upstream"
		require.NoError(t, c.Declare(ctxT(t), acemq.Exchange{Name: up, Kind: "topic"}))
		t.Cleanup(func() { _ = c.Transport().DeleteExchange(context.Background(), up) })
		var mu sync.Mutex
		var seen []int
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, m.Payload.N)
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}), acemq.Bind(up, "orders.#"))
		require.NoError(t, err)
		run(t, cons)
		pub := acemq.NewPublisher[Step](c, up, "orders.placed", acemq.KeyBy(func(s Step) string { return s.Key }))
		for n := 1; n <= 5; n++ {
			require.NoError(t, pub.Send(ctxT(t), Step{Key: "k", N: n}))
		}
		within(t, 10*time.Second, "5 handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 5 })
		require.Equal(t, []int{1, 2, 3, 4, 5}, seen)
	})
}

// TestOrderedQuorum: under Quorum every queue of the ordered topology is a
// quorum queue, and the consumer works on it.
func TestOrderedQuorum(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := orderedQueue(t, url, 2, "bad")
		c := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		var mu sync.Mutex
		var seen []int
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, m.Payload.N)
			if m.Payload.Key == "bad" {
				return acemq.Reject(errors.New("no"))
			}
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2, BlockOnFailure: true}), acemq.Quorum())
		require.NoError(t, err)
		for _, name := range []string{acemq.PartitionQueue(q, 0), acemq.PartitionQueue(q, 1), acemq.DeadLetterQueue(q), q + ".blocked"} {
			err := c.Transport().Declare(ctxT(t), transport.Queue{Name: name})
			require.ErrorIs(t, err, transport.ErrTopologyConflict, "%s is not a quorum queue", name)
		}
		run(t, cons)
		publishAll(t, c, []transport.Message{keyed(t, q, Step{Key: "k", N: 1}), keyed(t, q, Step{Key: "bad", N: 2}), keyed(t, q, Step{Key: "bad", N: 3})})
		within(t, 20*time.Second, "bad blocked, 3 held", func() bool {
			b, err := acemq.BlockedKeys(ctxT(t), c, q)
			require.NoError(t, err)
			return len(b) == 1 && b[0].Held == 1
		})
		err = c.Transport().Declare(ctxT(t), transport.Queue{Name: heldQueueOf(q, "bad")})
		require.ErrorIs(t, err, transport.ErrTopologyConflict, "the held queue is not a quorum queue")
	})
}

// TestOrderedSlowKey: a key whose handler hangs holds back only its own
// lane: the other keys of its partition go on.
func TestOrderedSlowKey(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := acemqtestQueue(t)
	release := make(chan struct{})
	var fast, slow atomic.Int64
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		if m.Payload.Key == "slow" {
			<-release
			slow.Add(1)
			return acemq.Done()
		}
		fast.Add(1)
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1}), acemq.Concurrency(2))
	require.NoError(t, err)
	run(t, cons)
	ms := []transport.Message{keyed(t, q, Step{Key: "slow", N: 1}), keyed(t, q, Step{Key: "slow", N: 2})}
	for n := 1; n <= 30; n++ {
		ms = append(ms, keyed(t, q, Step{Key: fmt.Sprintf("k%d", n%6), N: n}))
	}
	publishAll(t, c, ms)
	within(t, 10*time.Second, "the other keys done while slow hangs", func() bool { return fast.Load() == 30 })
	require.Zero(t, slow.Load())
	close(release)
	within(t, 10*time.Second, "slow done", func() bool { return slow.Load() == 2 })
}

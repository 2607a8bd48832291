package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
)

// onBoth runs fn as a subtest on the memory transport and on RabbitMQ.
func onBoth(t *testing.T, fn func(t *testing.T, url string)) {
	t.Helper()
	for _, b := range []struct {
		name string
		url  func(testing.TB) string
	}{{"memory", acemqtest.Memory}, {"rabbitmq", acemqtest.RabbitMQ}} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.url(t))
		})
	}
}

// batchQueue names a queue for the test and deletes it and its ladder
// (fastRetry's tiers included) when the test ends.
func batchQueue(t *testing.T, url string) string {
	t.Helper()
	q := acemqtestQueue(t)
	acemqtest.DeleteQueuesAfter(t, url, q, acemq.RetryQueue(q, 10*time.Millisecond), acemq.RetryQueue(q, 20*time.Millisecond))
	return q
}

// orders returns n orders numbered from 0, with the given prefix.
func orders(prefix string, n int) []OrderPlaced {
	out := make([]OrderPlaced, n)
	for i := range out {
		out[i] = OrderPlaced{OrderID: fmt.Sprintf("%s-%03d", prefix, i)}
	}
	return out
}

func sendAll(t *testing.T, c *acemq.Conn, q string, vs []OrderPlaced) {
	t.Helper()
	for _, r := range acemq.NewPublisher[OrderPlaced](c, "", q).SendAll(ctxT(t), vs) {
		require.NoError(t, r.Err)
	}
}

// batchLog records the batches a handler was given.
type batchLog struct {
	mu      sync.Mutex
	batches [][]string // order IDs, batch by batch
}

func (l *batchLog) add(batch []*acemq.Message[OrderPlaced]) {
	ids := make([]string, len(batch))
	for i, m := range batch {
		ids[i] = m.Payload.OrderID
	}
	l.mu.Lock()
	l.batches = append(l.batches, ids)
	l.mu.Unlock()
}

func (l *batchLog) sizes() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]int, len(l.batches))
	for i, b := range l.batches {
		out[i] = len(b)
	}
	return out
}

func (l *batchLog) ids() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, b := range l.batches {
		out = append(out, b...)
	}
	return out
}

func (l *batchLog) count() int { return len(l.ids()) }

// gate holds the first batch in the handler until opened; a test that
// fails first still opens it when it ends, so no handler is left blocked.
type gate struct {
	in   chan struct{}
	open chan struct{}
	once sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{in: make(chan struct{}, 1), open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

// hold blocks the first caller until release; later callers pass.
func (g *gate) hold() {
	select {
	case g.in <- struct{}{}:
		<-g.open
	default:
	}
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// handing is a transport that counts the deliveries of queue its Consume
// has handed over to the engine. Only queue's: the Conn also consumes the
// shared acemq.delay.due once another test has declared the delay
// topology, and its forwards would count.
type handing struct {
	transport.Transport
	queue string
	n     atomic.Int64
}

func (h *handing) Consume(ctx context.Context, queue string, prefetch int, handle func(transport.Delivery)) error {
	if queue != h.queue {
		return h.Transport.Consume(ctx, queue, prefetch, handle)
	}
	return h.Transport.Consume(ctx, queue, prefetch, func(d transport.Delivery) {
		handle(d)
		h.n.Add(1)
	})
}

func ready(t *testing.T, c *acemq.Conn, q string) int {
	t.Helper()
	info, err := c.Transport().Inspect(context.Background(), q)
	require.NoError(t, err)
	return info.Messages
}

func TestNewBatchConsumerRefusesBadInput(t *testing.T) {
	t.Parallel()
	c := connect(t)
	h := func(context.Context, []*acemq.Message[OrderPlaced]) []acemq.Ack { return nil }
	for _, tc := range []struct {
		name  string
		conn  *acemq.Conn
		queue string
		h     acemq.BatchHandler[OrderPlaced]
		opts  []acemq.BatchConsumerOption
		want  string
	}{
		{"nil conn", nil, "q", h, nil, "NewBatchConsumer was given a nil Conn"},
		{"empty queue", c, "", h, nil, "NewBatchConsumer was given an empty queue name"},
		{"nil handler", c, "q", nil, nil, `NewBatchConsumer of "q" was given a nil handler`},
		{"zero size", c, "q", h, []acemq.BatchConsumerOption{acemq.BatchSize(0)}, "BatchSize(0): want 1 to 65535"},
		{"size over a prefetch", c, "q", h, []acemq.BatchConsumerOption{acemq.BatchSize(65536)}, "BatchSize(65536): want 1 to 65535"},
		{"zero wait", c, "q", h, []acemq.BatchConsumerOption{acemq.BatchWait(0)}, "BatchWait(0s): want more than 0"},
		{"negative wait", c, "q", h, []acemq.BatchConsumerOption{acemq.BatchWait(-time.Second)}, "BatchWait(-1s): want more than 0"},
		{"prefetch below the size", c, "q", h, []acemq.BatchConsumerOption{acemq.BatchSize(50), acemq.Prefetch(49)}, "Prefetch(49) is below BatchSize(50)"},
		{"zero concurrency", c, "q", h, []acemq.BatchConsumerOption{acemq.Concurrency(0)}, "Concurrency(0)"},
		{"prefetch over 65535", c, "q", h, []acemq.BatchConsumerOption{acemq.Prefetch(65536)}, "Prefetch(65536): want 1 to 65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := acemq.NewBatchConsumer(tc.conn, tc.queue, tc.h, tc.opts...)
			require.Error(t, err)
			assert.Equal(t, 1, countPrefix(err.Error()), err.Error())
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	// BatchSize and BatchWait given to NewConsumer or NewRouter, and Ordered
	// given to NewBatchConsumer, do not compile: see
	// internal/repotest's TestMisplacedOptionsDoNotCompile.
}

// Batches never hold more than BatchSize, every message is handed over
// once, and a backlog fills batches to the brim.
func TestBatchSizesNeverOverBatchSize(t *testing.T) {
	t.Parallel()
	onBoth(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := batchQueue(t, url)
		var log batchLog
		cons, err := acemq.NewBatchConsumer(c, q, func(_ context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
			log.add(batch)
			return nil
		}, acemq.BatchSize(40), acemq.Concurrency(2), acemq.BatchWait(2*time.Second))
		require.NoError(t, err)
		sent := orders("o", 250)
		sendAll(t, c, q, sent)
		run(t, cons)
		eventually(t, "250 messages handled", func() bool { return log.count() >= 250 })
		sizes := log.sizes()
		for _, n := range sizes {
			assert.LessOrEqual(t, n, 40, "batch sizes %v", sizes)
			assert.Positive(t, n)
		}
		assert.Equal(t, 40, slices.Max(sizes), "a backlog fills batches: %v", sizes)
		got := log.ids()
		slices.Sort(got)
		want := make([]string, len(sent))
		for i, o := range sent {
			want[i] = o.OrderID
		}
		assert.Equal(t, want, got, "each message once")
		eventually(t, "the queue to empty", func() bool { return ready(t, c, q) == 0 })
	})
}

// A batch that does not fill goes to the handler once BatchWait has passed
// since its first message.
func TestBatchPartialAfterBatchWait(t *testing.T) {
	t.Parallel()
	onBoth(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := batchQueue(t, url)
		const wait = 150 * time.Millisecond
		got := make(chan int, 4)
		cons, err := acemq.NewBatchConsumer(c, q, func(_ context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
			got <- len(batch)
			return nil
		}, acemq.BatchSize(100), acemq.BatchWait(wait))
		require.NoError(t, err)
		sendAll(t, c, q, orders("p", 3))
		started := time.Now()
		run(t, cons)
		select {
		case n := <-got:
			assert.Equal(t, 3, n)
			assert.GreaterOrEqual(t, time.Since(started), wait, "the batch went before BatchWait passed")
		case <-time.After(10 * time.Second):
			t.Fatal("no batch within 10s")
		}
	})
}

// One message the handler rejects goes to .dlq alone; the rest of its
// batch are acked. A message an interceptor refuses, one of another type
// and one that does not decode settle alone and never reach the handler.
func TestBatchMessagesSettleOneByOne(t *testing.T) {
	t.Parallel()
	onBoth(t, func(t *testing.T, url string) {
		got, opt := newSettlements()
		refuse := acemq.WithConsumeInterceptor(func(_ context.Context, cc *acemq.ConsumeContext) error {
			if cc.Envelope.Headers["x-refuse"] == "yes" {
				return errors.New("not from here")
			}
			return nil
		})
		c := connectURL(t, url, opt, refuse)
		q := batchQueue(t, url)
		var log batchLog
		cons, err := acemq.NewBatchConsumer(c, q, func(_ context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
			log.add(batch)
			acks := make([]acemq.Ack, len(batch))
			for i, m := range batch {
				acks[i] = acemq.Done()
				if m.Payload.OrderID == "poison" {
					acks[i] = acemq.Reject(errors.New("no such customer"))
				}
			}
			return acks
		}, acemq.BatchWait(300*time.Millisecond))
		require.NoError(t, err)

		pub := acemq.NewPublisher[OrderPlaced](c, "", q)
		ctx := ctxT(t)
		for _, id := range []string{"a", "b", "poison", "c"} {
			require.NoError(t, pub.Send(ctx, OrderPlaced{OrderID: id}))
		}
		require.NoError(t, pub.Send(ctx, OrderPlaced{OrderID: "refused"}, acemq.Header("x-refuse", "yes")))
		require.NoError(t, acemq.NewPublisher[struct{ ID string }](c, "", q, acemq.TypeName("Refund")).Send(ctx, struct{ ID string }{"r"}))
		require.NoError(t, c.PublishRaw(ctx, acemq.RawMessage{RoutingKey: q, Envelope: &acemq.Envelope{ID: "bad-json", Version: 1, Attempt: 1}, Body: []byte("{not json"), ContentType: "application/json"}))
		run(t, cons)

		byID := map[string]acemq.Settlement{}
		for range 7 {
			s := got.next(t)
			byID[s.Envelope.ID] = s
		}
		got.none(t)
		outcomes := map[acemq.Outcome]int{}
		for _, s := range byID {
			outcomes[s.Outcome]++
		}
		assert.Equal(t, map[acemq.Outcome]int{acemq.OutcomeAcked: 3, acemq.OutcomeRejected: 1, acemq.OutcomeDeadLettered: 1, acemq.OutcomeParked: 2}, outcomes)
		assert.ElementsMatch(t, []string{"a", "b", "poison", "c"}, log.ids(), "only the good ones reach the handler")

		dl := take(t, c, acemq.DeadLetterQueue(q))
		dl2 := take(t, c, acemq.DeadLetterQueue(q))
		reasons := []string{dl.Headers["x-acemq-error"].(string), dl2.Headers["x-acemq-error"].(string)}
		assert.ElementsMatch(t, []string{"the handler rejected it: no such customer", "an interceptor refused it: not from here"}, reasons)
		take(t, c, acemq.ParkingQueue(q))
		take(t, c, acemq.ParkingQueue(q))
		empty(t, c, acemq.DeadLetterQueue(q))
		empty(t, c, acemq.ParkingQueue(q))
		empty(t, c, q)
	})
}

// A result of the wrong length, or a panic, retries every message of the
// batch with a reason that says which; the next attempt succeeds.
func TestBatchWrongLengthAndPanicRetryEveryMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fail   func(n int) []acemq.Ack
		reason string
	}{
		{"wrong length", func(int) []acemq.Ack { return []acemq.Ack{acemq.Done()} },
			"the batch handler returned 1 Acks for a batch of 3 (want one per message, or nil for all Done)"},
		{"empty, not nil", func(int) []acemq.Ack { return []acemq.Ack{} },
			"the batch handler returned 0 Acks for a batch of 3 (want one per message, or nil for all Done)"},
		{"panic", func(int) []acemq.Ack { panic("the pool is gone") },
			"the batch handler panicked: the pool is gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			onBoth(t, func(t *testing.T, url string) {
				got, opt := newSettlements()
				c := connectURL(t, url, opt, acemq.WithRetryPolicy(fastRetry))
				q := batchQueue(t, url)
				var calls atomic.Int32
				cons, err := acemq.NewBatchConsumer(c, q, func(_ context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
					calls.Add(1)
					if batch[0].Envelope.Attempt == 1 {
						return tc.fail(len(batch))
					}
					return nil
				}, acemq.BatchWait(2*time.Second))
				require.NoError(t, err)
				sendAll(t, c, q, orders("w", 3))
				run(t, cons)
				for range 3 {
					s := got.next(t)
					assert.Equal(t, acemq.OutcomeRetried, s.Outcome)
					assert.Equal(t, tc.reason, s.Reason)
					assert.Equal(t, acemq.AckNone, s.Ack.Kind(), "the handler's answer was not usable")
				}
				for range 3 {
					s := got.next(t)
					assert.Equal(t, acemq.OutcomeAcked, s.Outcome)
					assert.Equal(t, 2, s.Attempt)
				}
				got.none(t)
				empty(t, c, acemq.DeadLetterQueue(q))
			})
		})
	}
}

// Run's stop hands the batch being gathered to the handler at once, and
// returns once it has settled; what was prefetched beyond it goes back.
// Nothing is lost and nothing handled twice.
func TestBatchShutdownMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	onBoth(t, func(t *testing.T, url string) {
		got, opt := newSettlements()
		q := batchQueue(t, url)
		h := &handing{Transport: connectURL(t, url).Transport(), queue: q}
		c := connectURL(t, url, opt, acemq.WithTransport(h))
		var log batchLog
		g := newGate(t)
		cons, err := acemq.NewBatchConsumer(c, q, func(_ context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
			log.add(batch)
			g.hold() // the first batch holds the only worker
			return nil
		}, acemq.BatchSize(10), acemq.BatchWait(time.Minute), acemq.Prefetch(15))
		require.NoError(t, err)
		sendAll(t, c, q, orders("s", 40))

		ctx, stop := context.WithCancel(context.Background())
		t.Cleanup(stop) // a test failed before stop() ends Run before its queue goes
		done := make(chan error, 1)
		go func() { done <- cons.Run(ctx) }()
		<-g.in
		// 15 handed over: 10 in the handler, 5 for the next batch, which
		// waits for a worker (and would wait a minute to fill).
		eventually(t, "the prefetch to be handed over", func() bool { return h.n.Load() == 15 })
		stop()
		time.Sleep(50 * time.Millisecond) // Run is stopping, the handler still busy
		g.release()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return within 10s of its ctx ending")
		}
		assert.Equal(t, []int{10, 5}, log.sizes(), "the gathered batch went to the handler before Run returned")
		for range 15 {
			assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
		}
		got.none(t)
		assert.Equal(t, 25, ready(t, c, q), "the rest are still queued")

		// Another consumer takes the rest, each once.
		rest, err := acemq.NewBatchConsumer(c, q, func(_ context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
			log.add(batch)
			return nil
		}, acemq.BatchSize(10), acemq.BatchWait(50*time.Millisecond))
		require.NoError(t, err)
		run(t, rest)
		eventually(t, "all 40 handled", func() bool { return log.count() >= 40 })
		t.Log("batch sizes:", log.sizes())
		ids := log.ids()
		slices.Sort(ids)
		assert.Equal(t, 40, len(slices.Compact(ids)), "each message handled once")
		assert.Len(t, ids, 40)
	})
}

// Pause lets the batch in the handler settle, puts the batch being
// gathered back to the queue, unhandled, and takes nothing until Resume.
func TestBatchPauseMidBatch(t *testing.T) {
	t.Parallel()
	onBoth(t, func(t *testing.T, url string) {
		got, opt := newSettlements()
		q := batchQueue(t, url)
		h := &handing{Transport: connectURL(t, url).Transport(), queue: q}
		c := connectURL(t, url, opt, acemq.WithTransport(h))
		var log batchLog
		g := newGate(t)
		// BatchWait long enough that the first batch is a full 10 under
		// load: a first batch cut short by the wait leaves a full second
		// one waiting for the held handler, and the transport's last
		// delivery waiting behind it, never handed over.
		cons, err := acemq.NewBatchConsumer(c, q, func(_ context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
			log.add(batch)
			g.hold()
			return nil
		}, acemq.BatchSize(10), acemq.BatchWait(2*time.Second), acemq.Prefetch(15))
		require.NoError(t, err)
		sendAll(t, c, q, orders("p", 15))
		run(t, cons)
		t.Cleanup(g.release) // before Run's cleanup waits for the handler
		<-g.in
		eventually(t, "the prefetch to be handed over", func() bool { return h.n.Load() == 15 })

		cons.Pause()
		err = c.Health(ctxT(t))
		require.Error(t, err)
		assert.Contains(t, err.Error(), fmt.Sprintf("batch consumer of %q paused by Pause", q))
		g.release()
		for range 10 {
			assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
		}
		// On RabbitMQ a message put back before the broker saw the cancel
		// can be delivered to the paused channel again; it is ready once
		// the channel closes, after the batch in the handler settled.
		eventually(t, "the gathered batch to be back in the queue", func() bool { return ready(t, c, q) == 5 })
		got.none(t)
		assert.Equal(t, []int{10}, log.sizes(), "nothing handled while paused")

		cons.Resume()
		for range 5 {
			assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
		}
		assert.Equal(t, []int{10, 5}, log.sizes())
		got.none(t)
		require.NoError(t, c.Health(ctxT(t)))
	})
}

// Concurrency(n) runs n batches at once.
func TestBatchConcurrency(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := acemqtestQueue(t)
	var inFlight, most atomic.Int32
	all := make(chan struct{})
	var once sync.Once
	cons, err := acemq.NewBatchConsumer(c, q, func(_ context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		if n == 3 {
			once.Do(func() { close(all) })
		}
		select {
		case <-all:
		case <-time.After(10 * time.Second):
		}
		return nil
	}, acemq.BatchSize(5), acemq.Concurrency(3))
	require.NoError(t, err)
	sendAll(t, c, q, orders("c", 30))
	run(t, cons)
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatalf("at most %d batches ran at once, want 3", most.Load())
	}
	eventually(t, "the queue to empty", func() bool { return ready(t, c, q) == 0 && inFlight.Load() == 0 })
	assert.Equal(t, int32(3), most.Load())
}

// The batch's ctx carries every message: WhenSettled from it runs once per
// message, each with its own settlement, before OnSettled; the metrics
// count per message, and acemq.consume.batch.size records each batch.
func TestBatchWhenSettledAndMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var order []string
	var mu sync.Mutex
	hooks := make(chan struct{}, 8)
	c := connect(t, acemq.WithMeterProvider(mp), acemq.OnSettled(func(_ context.Context, s acemq.Settlement) {
		mu.Lock()
		order = append(order, "OnSettled "+string(s.Outcome))
		mu.Unlock()
		hooks <- struct{}{}
	}))
	q := acemqtestQueue(t)
	cons, err := acemq.NewBatchConsumer(c, q, func(ctx context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
		acemq.WhenSettled(ctx, func(_ context.Context, s acemq.Settlement) {
			mu.Lock()
			order = append(order, "WhenSettled "+string(s.Outcome))
			mu.Unlock()
		})
		acks := make([]acemq.Ack, len(batch))
		for i := range batch {
			acks[i] = acemq.Done()
		}
		acks[1] = acemq.Reject(errors.New("no"))
		return acks
	}, acemq.BatchWait(2*time.Second))
	require.NoError(t, err)
	sendAll(t, c, q, orders("m", 3))
	run(t, cons)
	for range 3 {
		<-hooks
	}
	mu.Lock()
	assert.Equal(t, []string{
		"WhenSettled acked", "OnSettled acked",
		"WhenSettled rejected", "OnSettled rejected",
		"WhenSettled acked", "OnSettled acked",
	}, order)
	mu.Unlock()
	dest := "messaging.destination.name=" + q + " "
	assert.Equal(t, map[string]float64{dest + "messaging.system=rabbitmq ": 1}, points(t, reader, "acemq.consume.batch.size"))
	total := points(t, reader, "acemq.consume.total")
	assert.Equal(t, 2.0, total["messaging.acemq.outcome=acked "+dest+"messaging.system=rabbitmq "], "%v", total)
	assert.Equal(t, 1.0, total["messaging.acemq.outcome=rejected "+dest+"messaging.system=rabbitmq "], "%v", total)
	assert.Equal(t, 3.0, sum(points(t, reader, "acemq.consume.duration")))
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// The kill switch counts a failed batch message by message: one panicking
// batch of 5 is 5 failures and trips a switch that wants 5.
func TestBatchKillSwitchCountsEveryMessage(t *testing.T) {
	t.Parallel()
	c := connect(t, acemq.WithRetryPolicy(fastRetry))
	q := acemqtestQueue(t)
	var calls atomic.Int32
	cons, err := acemq.NewBatchConsumer(c, q, func(context.Context, []*acemq.Message[OrderPlaced]) []acemq.Ack {
		calls.Add(1)
		panic("the database is down")
	}, acemq.BatchWait(2*time.Second), acemq.KillSwitch(acemq.KillSwitchPolicy{MinFailures: 5, Threshold: 1, CoolDown: time.Hour}))
	require.NoError(t, err)
	sendAll(t, c, q, orders("k", 5))
	run(t, cons)
	eventually(t, "the kill switch to trip", func() bool {
		return healthSays(c, fmt.Sprintf("batch consumer of %q paused by the kill switch", q))
	})
	assert.Equal(t, int32(1), calls.Load(), "one batch tripped it")
}

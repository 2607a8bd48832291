package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/internal/ordering"
	"github.com/acemq/acemq/transport"
)

// The consumers' pairs of the composition suite (issue 37 items 4, 5 and
// 6, issue 41 item 2): every kind of consumer meets Health before its Run,
// after its Run returned and after its Close; Delete meets an ordered
// consumer's blocked keys and a Router's ladder; an invalid option meets
// every method of a Router.

// kind is one kind of consumer, as the pairs name it, and the word its
// Health texts use for it.
type kind struct {
	name, word string
}

var kinds = []kind{
	{"consumer", "consumer"},
	{"ordered", "consumer"},
	{"batch", "batch consumer"},
	{"Router", "router"},
}

// lifecycled is what every kind of consumer has.
type lifecycled interface {
	Run(ctx context.Context) error
	Close() error
	Topology() []acemq.Topology
}

// made is a consumer of a kind, whose handler reports each OrderID it
// starts on started, and holds a message whose OrderID is "hold" until
// release is closed.
type made struct {
	k       kind
	c       lifecycled
	q       string
	started chan string
	release chan struct{}
}

// makeKind makes a consumer of k on c, with opts, deleted with everything
// it made when the test ends (registered before any Run of the test, so
// that it runs after the Run stopped).
func makeKind(t *testing.T, url string, c *acemq.Conn, k kind, opts ...acemq.AnyConsumerOption) *made {
	t.Helper()
	m := &made{k: k, q: acemqtestQueue(t), started: make(chan string, 100), release: make(chan struct{})}
	handle := func(_ context.Context, msg *acemq.Message[OrderPlaced]) acemq.Ack {
		m.started <- msg.Payload.OrderID
		if msg.Payload.OrderID == "hold" {
			<-m.release
		}
		return acemq.Done()
	}
	var err error
	switch k.name {
	case "consumer":
		m.c, err = acemq.NewConsumer(c, m.q, handle, consumerOpts(opts)...)
	case "ordered":
		m.q = orderedQueue(t, url, 2) // deletes by name too, should Delete miss something
		m.c, err = acemq.NewConsumer(c, m.q, handle, append(consumerOpts(opts), acemq.Ordered(acemq.OrderPolicy{Partitions: 2}))...)
	case "batch":
		m.c, err = acemq.NewBatchConsumer(c, m.q, func(ctx context.Context, batch []*acemq.Message[OrderPlaced]) []acemq.Ack {
			for _, msg := range batch {
				handle(ctx, msg)
			}
			return nil
		}, append(batchOpts(opts), acemq.BatchWait(10*time.Millisecond))...)
	case "Router":
		r := acemq.NewRouter(c, m.q, consumerOpts(opts)...)
		acemq.Route(r, handle)
		m.c = r
	}
	require.NoError(t, err)
	acemqtest.DeleteAfter(t, url, m.c)
	return m
}

// consumerOpts and batchOpts are opts as NewConsumer and NewBatchConsumer
// take them.
func consumerOpts(opts []acemq.AnyConsumerOption) []acemq.ConsumerOption {
	out := make([]acemq.ConsumerOption, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

func batchOpts(opts []acemq.AnyConsumerOption) []acemq.BatchConsumerOption {
	out := make([]acemq.BatchConsumerOption, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

// send publishes an OrderPlaced with MessageID id where m takes it from:
// keyed by id to the exchange of an ordered queue.
func (m *made) send(t *testing.T, c *acemq.Conn, id string) {
	t.Helper()
	pub := acemq.NewPublisher[OrderPlaced](c, "", m.q)
	opts := []acemq.SendOption{acemq.MessageID(id)}
	if m.k.name == "ordered" {
		pub = acemq.NewPublisher[OrderPlaced](c, m.q, "")
		opts = append(opts, acemq.Key(id))
	}
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: id}, opts...))
}

// waitStarted waits until the handler started id.
func (m *made) waitStarted(t *testing.T, id string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case got := <-m.started:
			if got == id {
				return
			}
		case <-timeout:
			t.Fatalf("the handler did not start %q within 30s", id)
		}
	}
}

// start runs m in the background until stop, which returns what Run did.
func (m *made) start(t *testing.T) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.c.Run(ctx) }()
	var once bool
	var err error
	stop = func() error {
		if !once {
			once = true
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Error("Run did not return within 30s of its ctx ending")
			}
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// healthy waits until c's Health is nil: every consumer runs and consumes
// (an ordered one holds its partitions).
func healthy(t *testing.T, c *acemq.Conn) {
	t.Helper()
	var last error
	within(t, 60*time.Second, "Health to be nil", func() bool {
		last = c.Health(ctxT(t))
		return last == nil
	})
}

// notRunning checks that c's Health fails with ErrNotRunning naming m's
// consumer and why, and that the report says the same in state.
func notRunning(t *testing.T, c *acemq.Conn, m *made, state acemq.ConsumerState, why string) {
	t.Helper()
	text := fmt.Sprintf("%s of %q is not running: %s", m.k.word, m.q, why)
	h := consumerHealth(t, c, m.q)
	assert.Equal(t, state, h.State)
	require.ErrorIs(t, h.Err, acemq.ErrNotRunning)
	assert.Contains(t, h.Err.Error(), text)
	health := c.Health(ctxT(t))
	require.ErrorIs(t, health, acemq.ErrNotRunning, "readiness fails")
	assert.Contains(t, health.Error(), text)
	assert.NotErrorIs(t, health, acemq.ErrFaulted)
	assert.NotErrorIs(t, health, acemq.ErrUnavailable)
}

var _ = func() struct{} {
	for _, k := range kinds {
		registerPair(pair{a: k.name, b: "Health before Run",
			holds: "made and not run, an essential one fails Health with ErrNotRunning naming it (starting since it was made); a Nonessential one is in the report but not in Health; once Run consumes, Health is nil",
			run: func(t *testing.T, url string) {
				c := connectURL(t, url)
				m := makeKind(t, url, c, k)
				notRunning(t, c, m, acemq.StateStarting, "made at ")

				if k.name == "consumer" {
					c2 := connectURL(t, url)
					spare := makeKind(t, url, c2, k, acemq.Nonessential())
					h := consumerHealth(t, c2, spare.q)
					require.ErrorIs(t, h.Err, acemq.ErrNotRunning)
					assert.True(t, h.Nonessential)
					require.NoError(t, c2.Health(ctxT(t)), "a Nonessential consumer not run")
				}

				m.start(t)
				healthy(t, c)
				m.send(t, c, "after")
				m.waitStarted(t, "after")
				require.NoError(t, c.Health(ctxT(t)))
			}})
		registerPair(pair{a: k.name, b: "Health after Run returned",
			holds: "once its Run returned nil (its ctx ended), nothing consumes: Health fails with ErrNotRunning naming it, the report says stopped; a new Run makes it healthy again",
			run: func(t *testing.T, url string) {
				c := connectURL(t, url)
				m := makeKind(t, url, c, k)
				stop := m.start(t)
				healthy(t, c)
				require.NoError(t, stop(), "Run returns nil when its ctx ends")
				notRunning(t, c, m, acemq.StateStopped, "its Run returned at ")

				m.start(t)
				healthy(t, c)
			}})
		registerPair(pair{a: k.name, b: "Health after Close",
			holds: "Close while a handler holds a delivery waits for it to settle (acked), then the running Run returns nil; the consumer is out of the report at once and Health is nil; a later Run fails with ErrConsumerClosed naming it; Close again is nil; Topology still lists its queues",
			run: func(t *testing.T, url string) {
				got, opt := newSettlements()
				c := connectURL(t, url, opt)
				m := makeKind(t, url, c, k)
				stop := m.start(t)
				healthy(t, c)
				m.send(t, c, "hold")
				m.waitStarted(t, "hold")

				closed := make(chan error, 1)
				go func() { closed <- m.c.Close() }()
				within(t, 10*time.Second, "the consumer to leave the report", func() bool {
					return len(inReport(c.HealthReport(ctxT(t)), m.q)) == 0
				})
				require.NoError(t, c.Health(ctxT(t)), "closed on purpose: no error")
				select {
				case err := <-closed:
					t.Fatalf("Close returned (%v) while the handler still held its delivery", err)
				case <-time.After(100 * time.Millisecond):
				}
				close(m.release)
				select {
				case err := <-closed:
					require.NoError(t, err)
				case <-time.After(30 * time.Second):
					t.Fatal("Close did not return within 30s of the handler returning")
				}
				require.NoError(t, stop(), "the Run that Close stopped returns nil")
				s := got.next(t)
				assert.Equal(t, "hold", s.Envelope.ID)
				assert.Equal(t, acemq.OutcomeAcked, s.Outcome, "the delivery in flight settled")

				assert.Empty(t, inReport(c.HealthReport(ctxT(t)), m.q))
				require.NoError(t, c.Health(ctxT(t)))
				err := m.c.Run(ctxT(t))
				require.ErrorIs(t, err, acemq.ErrConsumerClosed)
				assert.Contains(t, err.Error(), fmt.Sprintf("%s of %q was closed", m.k.word, m.q))
				require.NoError(t, m.c.Close(), "Close again")
				assert.NotEmpty(t, m.c.Topology(), "Topology after Close, for Delete")
			}})
	}
	return struct{}{}
}()

// gone checks that nothing of names is on the broker behind c: each is no
// queue (and no lease: a lease is an exclusive queue on RabbitMQ, no queue
// at all on memory).
func gone(t *testing.T, c *acemq.Conn, names []string) {
	t.Helper()
	for _, n := range names {
		_, err := c.Transport().Inspect(ctxT(t), n)
		assert.ErrorIs(t, err, transport.ErrNotFound, "%s is still there", n)
	}
}

// queuesOf are the queues among topo.
func queuesOf(topo []acemq.Topology) []string {
	var names []string
	for _, it := range topo {
		if q, ok := it.(acemq.Queue); ok {
			names = append(names, q.Name)
		}
	}
	return names
}

var _ = registerPair(pair{a: "ordered", b: "Delete",
	holds: "after Conn.Delete(cons.Topology()...) on another Conn, nothing of an ordered consumer is left: its exchange, partitions, .dlq, .parked, members, registry, status, fencing counter, leases, and the held and re-run queues of a key it blocked (which held 4 messages and the one to re-run)",
	run: func(t *testing.T, url string) {
		const p = 2
		q := orderedQueue(t, url, p, "k")
		c := connectURL(t, url)
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			if m.Payload.N == 1 {
				return acemq.Reject(errors.New("the account is closed"))
			}
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{Partitions: p, BlockOnFailure: true}))
		require.NoError(t, err)
		run(t, cons)
		var ms []transport.Message
		for n := 1; n <= 5; n++ {
			ms = append(ms, keyed(t, q, Step{Key: "k", N: n}))
		}
		publishAll(t, c, ms)
		within(t, 30*time.Second, "k blocked with 4 held", func() bool {
			keys, err := acemq.BlockedKeys(ctxT(t), c, q)
			require.NoError(t, err)
			return len(keys) == 1 && keys[0].Held == 4
		})
		require.NoError(t, cons.Close())
		// A release with a re-run, while nothing runs: the failed message
		// waits in the key's re-run queue, the 4 others in its held queue.
		require.NoError(t, acemq.ReleaseKey(ctxT(t), c, q, "k", acemq.RerunFailed()))
		held, rerun := ordering.HeldQueue(q, "k"), ordering.RerunQueue(q, "k")
		for name, want := range map[string]int{held: 4, rerun: 1} {
			info, err := c.Transport().Inspect(ctxT(t), name)
			require.NoError(t, err, name)
			require.Equal(t, want, info.Messages, name)
		}

		topo := cons.Topology()
		require.NoError(t, connectURL(t, url).Delete(ctxT(t), topo...))

		names := append(queuesOf(topo), held, rerun, ordering.FenceCounter(q), ordering.DeclareLease(q), q+".blocked.lock")
		for i := range p + 1 {
			names = append(names, fmt.Sprintf("%s.slot.%d", q, i))
		}
		require.Contains(t, names, ordering.BlockedQueue(q))
		require.Contains(t, names, ordering.MembersQueue(q))
		require.Contains(t, names, ordering.StatusQueue(q))
		gone(t, c, names)
		err = c.Transport().Publish(ctxT(t), keyed(t, q, Step{Key: "k", N: 6}))
		assert.ErrorIs(t, err, transport.ErrNotFound, "the exchange %q is gone", q)
		_, err = acemq.BlockedKeys(ctxT(t), c, q)
		assert.ErrorContains(t, err, "has no blocked-key registry")
	}})

var _ = registerPair(pair{a: "Router", b: "Delete",
	holds: "after Conn.Delete(r.Topology()...), nothing of a Router that retried (a message waiting in its tier), dead-lettered and parked is left: its queue, tiers, .dlq, .parked, and its binding to the service's exchange; an invalid Router lists nothing and deletes nothing, without a panic",
	run: func(t *testing.T, url string) {
		got, opt := newSettlements()
		c := connectURL(t, url, opt)
		x := acemq.Exchange{Name: acemqtest.QueueName(t, "events"), Kind: "topic"}
		require.NoError(t, c.Declare(ctxT(t), x))
		acemqtest.DeleteAfter(t, url, acemqtest.Declarations{x})
		q := acemqtestQueue(t)
		policy := acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{time.Hour}}
		r := acemq.NewRouter(c, q, acemq.WithConsumerRetry(policy), acemq.Bind(x.Name, "order.*"))
		acemqtest.DeleteAfter(t, url, r) // a safety net: the test deletes first
		acemq.Route(r, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			if m.Payload.OrderID == "retry" {
				return acemq.Retry(errors.New("later"))
			}
			return acemq.Reject(errors.New("never"))
		})
		run(t, r)
		pub := acemq.NewPublisher[OrderPlaced](c, x.Name, "order.new")
		require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "retry"}))
		require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "reject"}))
		require.NoError(t, acemq.NewPublisher[RefundIssued](c, x.Name, "order.refund").Send(ctxT(t), RefundIssued{}))
		var outcomes []acemq.Outcome
		for range 3 {
			outcomes = append(outcomes, got.next(t).Outcome)
		}
		slices.Sort(outcomes)
		require.Equal(t, []acemq.Outcome{acemq.OutcomeParked, acemq.OutcomeRejected, acemq.OutcomeRetried}, outcomes)
		info, err := c.Transport().Inspect(ctxT(t), acemq.RetryQueue(q, time.Hour))
		require.NoError(t, err)
		require.Equal(t, 1, info.Messages, "the retried message waits in its tier")

		require.NoError(t, r.Close())
		topo := r.Topology()
		require.NoError(t, connectURL(t, url).Delete(ctxT(t), topo...))
		names := queuesOf(topo)
		require.Equal(t, []string{q, acemq.DeadLetterQueue(q), acemq.ParkingQueue(q), acemq.RetryQueue(q, time.Hour)}, names)
		gone(t, c, names)
		err = pub.Send(ctxT(t), OrderPlaced{OrderID: "late"})
		require.ErrorIs(t, err, acemq.ErrUnroutable, "the binding went with the queue")

		bad := acemq.NewRouter(c, acemqtestQueue(t), acemq.Concurrency(0))
		acemqtest.DeleteAfter(t, url, bad)
		require.Empty(t, bad.Topology())
		require.NoError(t, c.Delete(ctxT(t), bad.Topology()...))
	}})

var _ = registerPair(pair{a: "Router", b: "invalid option",
	holds: "NewRouter(c, q, Concurrency(0)) declares nothing and every method is safe: Topology lists nothing, Pause, Resume, Partitions and Route do nothing harmful, Run returns the option's error, the report shows it faulted naming the option, DeleteAfter cleans up without a panic, and Close takes it out of the report (then Run fails with ErrConsumerClosed); a nil Router and one with a nil Conn are safe too",
	run: func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := acemqtestQueue(t)
		r := acemq.NewRouter(c, q, acemq.Concurrency(0))
		acemqtest.DeleteAfter(t, url, r)
		assert.Empty(t, r.Topology())
		r.Pause()
		r.Resume()
		assert.Empty(t, r.Partitions())
		acemq.Route(r, nop[OrderPlaced])
		err := r.Run(ctxT(t))
		require.ErrorContains(t, err, "Concurrency(0)")
		h := consumerHealth(t, c, q)
		assert.Equal(t, acemq.StateFaulted, h.State)
		require.ErrorIs(t, h.Err, acemq.ErrFaulted)
		assert.Contains(t, h.Err.Error(), "Concurrency(0)")
		require.ErrorIs(t, c.Health(ctxT(t)), acemq.ErrFaulted)
		_, err = c.Transport().Inspect(ctxT(t), q)
		require.ErrorIs(t, err, transport.ErrNotFound, "nothing declared")

		require.NoError(t, r.Close())
		require.NoError(t, r.Close())
		assert.Empty(t, inReport(c.HealthReport(ctxT(t)), q))
		require.NoError(t, c.Health(ctxT(t)))
		require.ErrorIs(t, r.Run(ctxT(t)), acemq.ErrConsumerClosed)

		for name, r := range map[string]*acemq.Router{"nil": nil, "nil Conn": acemq.NewRouter(nil, q)} {
			assert.Empty(t, r.Topology(), name)
			r.Pause()
			r.Resume()
			assert.Empty(t, r.Partitions(), name)
			assert.Error(t, r.Run(ctxT(t)), name)
			assert.NoError(t, r.Close(), name)
		}
	}})

// oldestGauge is acemq.consumer.oldest_inflight for queue, or -1 when it
// has no point for it.
func oldestGauge(t *testing.T, reader *sdkmetric.ManualReader, queue string) float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			g, ok := m.Data.(metricdata.Gauge[float64])
			if m.Name != "acemq.consumer.oldest_inflight" || !ok {
				continue
			}
			for _, p := range g.DataPoints {
				if v, _ := p.Attributes.Value("messaging.destination.name"); v.AsString() == queue {
					return p.Value
				}
			}
		}
	}
	return -1
}

var _ = registerPair(pair{a: "Router", b: "Health",
	holds: "a Router's handler that does not return shows: acemq.consumer.oldest_inflight grows, and past StuckAfter the report says stuck naming the message and Health fails with ErrStuck (not ErrNotRunning or ErrFaulted); once the handler returns the Router is consuming and Health is nil again, the gauge back at 0",
	run: func(t *testing.T, url string) {
		reader := sdkmetric.NewManualReader()
		c := connectURL(t, url, acemq.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
		m := makeKind(t, url, c, kind{"Router", "router"}, acemq.StuckAfter(300*time.Millisecond), acemq.Concurrency(2))
		m.start(t)
		stateIs(t, c, m.q, acemq.StateConsuming) // Run began, and its engine is listed
		healthy(t, c)
		assert.Zero(t, oldestGauge(t, reader, m.q), "nothing in flight")
		sent := time.Now()
		m.send(t, c, "hold")
		m.waitStarted(t, "hold")
		started := time.Now()
		m.send(t, c, "other")
		m.waitStarted(t, "other") // the second worker goes on meanwhile
		h := stateIs(t, c, m.q, acemq.StateStuck)
		require.ErrorIs(t, h.Err, acemq.ErrStuck)
		assert.Contains(t, h.Err.Error(), fmt.Sprintf("router of %q is stuck: a handler has held message hold since ", m.q))
		assert.Contains(t, h.Err.Error(), "over StuckAfter's 300ms")
		assert.GreaterOrEqual(t, h.InFlightFor, 300*time.Millisecond)
		assert.False(t, h.Since.Before(sent) || h.Since.After(started), "Since %v is when the handler began: after the send at %v, before %v", h.Since, sent, started)
		health := c.Health(ctxT(t))
		require.ErrorIs(t, health, acemq.ErrStuck)
		assert.NotErrorIs(t, health, acemq.ErrNotRunning)
		assert.NotErrorIs(t, health, acemq.ErrFaulted)
		assert.GreaterOrEqual(t, oldestGauge(t, reader, m.q), 0.3)

		close(m.release)
		stateIs(t, c, m.q, acemq.StateConsuming)
		healthy(t, c)
		assert.Zero(t, consumerHealth(t, c, m.q).InFlightFor)
		assert.Zero(t, oldestGauge(t, reader, m.q))
	}})

// TestStuckHandler: every kind of consumer reports a handler that holds a
// delivery past StuckAfter (a batch handler holds its batch), and the age
// of its oldest delivery in flight, as the Router×Health pair shows for a
// Router; StuckAfter refuses a duration that is not above 0.
func TestStuckHandler(t *testing.T) {
	t.Parallel()
	for _, k := range kinds[:3] {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			onBrokers(t, func(t *testing.T, url string) {
				c := connectURL(t, url)
				m := makeKind(t, url, c, k, acemq.StuckAfter(200*time.Millisecond))
				m.start(t)
				healthy(t, c)
				m.send(t, c, "hold")
				m.waitStarted(t, "hold")
				h := stateIs(t, c, m.q, acemq.StateStuck)
				require.ErrorIs(t, h.Err, acemq.ErrStuck)
				assert.Contains(t, h.Err.Error(), fmt.Sprintf("%s of %q is stuck: a handler has held message hold since ", k.word, m.q))
				require.ErrorIs(t, c.Health(ctxT(t)), acemq.ErrStuck)
				close(m.release)
				healthy(t, c)
			})
		})
	}
	t.Run("invalid", func(t *testing.T) {
		t.Parallel()
		c := connect(t)
		for _, d := range []time.Duration{0, -time.Second} {
			_, err := acemq.NewConsumer(c, acemqtestQueue(t), nop[OrderPlaced], acemq.StuckAfter(d))
			require.Error(t, err)
			assert.Contains(t, err.Error(), fmt.Sprintf("StuckAfter(%v): want more than 0", d))
			assert.True(t, strings.HasPrefix(err.Error(), "acemq: "), err.Error())
		}
	})
}

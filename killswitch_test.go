package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// eventually polls cond until it holds, failing the test after a generous
// limit: the tests wait for states, never for times.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting, after 60s, for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logCounter is a slog handler that counts the messages logged.
type logCounter struct {
	mu    sync.Mutex
	n     map[string]int
	lines []string
}

func (l *logCounter) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

func newLogCounter() *logCounter { return &logCounter{n: map[string]int{}} }

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.n[r.Message]++
	l.mu.Unlock()
	return nil
}
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }

func (l *logCounter) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[msg]
}

// The log lines of the kill switch and of Pause.
const (
	logTripped     = "acemq: the kill switch paused the consumer"
	logProbeFailed = "acemq: a kill switch probe failed; the consumer stays paused"
	logProbing     = "acemq: the kill switch probes the consumer"
	logRecovered   = "acemq: the kill switch resumed the consumer after a probe succeeded"
)

// pausedGauge reads acemq.consumer.paused for queue, or -1 when it has no
// point for it.
func pausedGauge(t *testing.T, reader *sdkmetric.ManualReader, queue string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			g, ok := m.Data.(metricdata.Gauge[int64])
			if m.Name != "acemq.consumer.paused" || !ok {
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

// healthSays reports whether Health's error contains want.
func healthSays(c *acemq.Conn, want string) bool {
	err := c.Health(context.Background())
	return err != nil && strings.Contains(err.Error(), want)
}

func TestKillSwitchPolicyIsChecked(t *testing.T) {
	t.Parallel()
	c := connect(t)
	h := func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() }
	for _, tc := range []struct {
		name   string
		policy acemq.KillSwitchPolicy
		want   string
	}{
		{"negative window", acemq.KillSwitchPolicy{Window: -time.Second}, "KillSwitchPolicy.Window is -1s"},
		{"negative min failures", acemq.KillSwitchPolicy{MinFailures: -1}, "KillSwitchPolicy.MinFailures is -1"},
		{"threshold above 1", acemq.KillSwitchPolicy{Threshold: 1.5}, "KillSwitchPolicy.Threshold is 1.5"},
		{"negative threshold", acemq.KillSwitchPolicy{Threshold: -0.1}, "KillSwitchPolicy.Threshold is -0.1"},
		{"NaN threshold", acemq.KillSwitchPolicy{Threshold: math.NaN()}, "KillSwitchPolicy.Threshold is NaN"},
		{"negative cool-down", acemq.KillSwitchPolicy{CoolDown: -time.Minute}, "KillSwitchPolicy.CoolDown is -1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := acemqtestQueue(t)
			_, err := acemq.NewConsumer(c, q, h, acemq.KillSwitch(tc.policy))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "acemq: consumer of "), err.Error())
			assert.Equal(t, 1, countPrefix(err.Error()), err.Error())

			r := acemq.NewRouter(c, q, acemq.KillSwitch(tc.policy))
			acemq.Route(r, h)
			err = r.Run(ctxT(t))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 1, countPrefix(err.Error()), err.Error())
			r.Pause() // an invalid router's Pause and Resume do nothing, and do not panic
			r.Resume()
		})
	}
	_, err := acemq.NewConsumer(c, acemqtestQueue(t), h, acemq.KillSwitch(acemq.KillSwitchPolicy{}), acemq.KillSwitch(acemq.KillSwitchPolicy{Threshold: 1}))
	assert.NoError(t, err, "zero fields take defaults; a Threshold of 1 is valid")
}

// TestKillSwitchCounts checks which settlements count as failures: a run
// of them past MinFailures trips the switch, a run of decisions does not.
func TestKillSwitchCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ack   func() acemq.Ack
		trips bool
	}{
		{"retried", func() acemq.Ack { return acemq.Retry(errors.New("db down")) }, true},
		{"panic", func() acemq.Ack { panic("db down") }, true},
		{"reject", func() acemq.Ack { return acemq.Reject(errors.New("no such order")) }, false},
		{"fatal", func() acemq.Ack { return acemq.AckOf(acemq.Fatal(errors.New("malformed"))) }, false},
		{"acked", acemq.Done, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, opt := newSettlements()
			c := connect(t, opt)
			q := acemqtestQueue(t)
			cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return tc.ack() },
				acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 100, Delays: []time.Duration{time.Hour}}),
				acemq.KillSwitch(acemq.KillSwitchPolicy{MinFailures: 5, Threshold: 1, CoolDown: time.Hour}))
			require.NoError(t, err)
			run(t, cons)
			pub := acemq.NewPublisher[OrderPlaced](c, "", q)
			for i := range 5 {
				require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: fmt.Sprint(i)}))
				got.next(t)
			}
			if !tc.trips {
				require.NoError(t, c.Health(ctxT(t)))
				return
			}
			err = c.Health(ctxT(t))
			require.Error(t, err)
			assert.Contains(t, err.Error(), fmt.Sprintf("consumer of %q paused by the kill switch since ", q))
			assert.Contains(t, err.Error(), " after 5 failures in 30s; next probe at ")
			assert.Equal(t, 1, countPrefix(err.Error()), err.Error())
			require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "while paused"}))
			got.none(t)
			eventually(t, "the message sent while paused to wait in the queue", func() bool {
				info, err := c.Transport().Inspect(context.Background(), q)
				return err == nil && info.Messages == 1
			})
		})
	}
	t.Run("parked", func(t *testing.T) {
		t.Parallel()
		got, opt := newSettlements()
		c := connect(t, opt)
		q := acemqtestQueue(t)
		cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() },
			acemq.KillSwitch(acemq.KillSwitchPolicy{MinFailures: 1, Threshold: 1}))
		require.NoError(t, err)
		run(t, cons)
		for range 5 {
			require.NoError(t, acemq.NewPublisher[RefundIssued](c, "", q).Send(ctxT(t), RefundIssued{}))
			assert.Equal(t, acemq.OutcomeParked, got.next(t).Outcome)
		}
		require.NoError(t, c.Health(ctxT(t)))
	})
}

// TestKillSwitchOutage is the scenario: the handler's database goes
// down under load and comes back. The switch trips, the messages wait in
// their queue rather than climb the ladder into .dlq, probes fail while the
// database is down, and once it is up every message is handled. On a
// quorum queue too, whose delivery limit counts the returns of a trip.
func TestKillSwitchOutage(t *testing.T) {
	t.Parallel()
	t.Run("classic", func(t *testing.T) { t.Parallel(); outage(t) })
	t.Run("quorum", func(t *testing.T) { t.Parallel(); outage(t, acemq.Quorum()) })
}

func outage(t *testing.T, opts ...acemq.ConsumerOption) {
	policy := acemq.RetryPolicy{MaxAttempts: 5, Delays: []time.Duration{20 * time.Millisecond, 50 * time.Millisecond}}
	onBrokers(t, func(t *testing.T, url string) {
		logs := newLogCounter()
		defer func() {
			if t.Failed() {
				t.Log(strings.Join(logs.all(), "\n"))
			}
		}()
		reader := sdkmetric.NewManualReader()
		q := consumerQueue(t, url, policy)
		var (
			mu       sync.Mutex
			handled  = map[string]int{} // times each message was handled
			again    int                // handled more than once: at least once, not exactly once
			unhandle []string           // acked without having been handled
			outcomes = map[acemq.Outcome]int{}
		)
		c := connectURL(t, url, acemq.WithLogger(slog.New(logs)),
			acemq.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			acemq.OnSettled(func(_ context.Context, s acemq.Settlement) {
				mu.Lock()
				defer mu.Unlock()
				outcomes[s.Outcome]++
				if s.Outcome == acemq.OutcomeAcked && handled[s.Envelope.ID] == 0 {
					unhandle = append(unhandle, s.Envelope.ID)
				}
			}))
		var down atomic.Bool
		down.Store(true)
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			if down.Load() {
				return acemq.Retry(errors.New("the database is down"))
			}
			mu.Lock()
			handled[m.Envelope.ID]++
			if handled[m.Envelope.ID] > 1 {
				again++
			}
			mu.Unlock()
			return acemq.Done()
		}, append([]acemq.ConsumerOption{acemq.Concurrency(4), acemq.WithConsumerRetry(policy),
			acemq.KillSwitch(acemq.KillSwitchPolicy{Window: 5 * time.Second, MinFailures: 5, Threshold: 0.5, CoolDown: 100 * time.Millisecond})},
			opts...)...)
		require.NoError(t, err)

		const before, during = 400, 200
		pub := acemq.NewPublisher[OrderPlaced](c, "", q)
		send := func(from, n int) {
			batch := make([]OrderPlaced, n)
			for i := range batch {
				batch[i].OrderID = fmt.Sprint(from + i)
			}
			for _, r := range pub.SendAll(ctxT(t), batch) {
				require.NoError(t, r.Err)
			}
		}
		send(0, before)
		run(t, cons)
		eventually(t, "the kill switch to trip", func() bool { return logs.count(logTripped) > 0 })
		assert.True(t, healthSays(c, fmt.Sprintf("consumer of %q paused by the kill switch since ", q)), "Health: %v", c.Health(context.Background()))
		health := c.Health(context.Background())
		assert.ErrorIs(t, health, acemq.ErrTripped)
		assert.NotErrorIs(t, health, acemq.ErrPaused, "a trip is not a Pause")
		assert.NotErrorIs(t, health, acemq.ErrUnavailable, "the broker is fine")
		if cs := c.HealthReport(context.Background()).Consumers; assert.Len(t, cs, 1) {
			assert.Equal(t, acemq.StateTripped, cs[0].State)
			assert.False(t, cs[0].Since.IsZero())
		}
		assert.Equal(t, int64(1), pausedGauge(t, reader, q))
		pausedAt := time.Now()
		send(before, during) // the load goes on while the consumer is paused
		eventually(t, "two probes to fail", func() bool { return logs.count(logProbeFailed) >= 2 })
		down.Store(false) // the database is back
		eventually(t, "the kill switch to resume the consumer", func() bool { return logs.count(logRecovered) > 0 })
		paused := time.Since(pausedAt)
		eventually(t, "every message to be handled and acked", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == before+during && outcomes[acemq.OutcomeAcked] >= before+during
		})
		require.NoError(t, c.Health(ctxT(t)))
		assert.Equal(t, int64(0), pausedGauge(t, reader, q))
		for _, name := range []string{acemq.DeadLetterQueue(q), acemq.ParkingQueue(q)} {
			empty(t, c, name)
		}
		mu.Lock()
		defer mu.Unlock()
		assert.Empty(t, unhandle, "acked without being handled")
		assert.Zero(t, outcomes[acemq.OutcomeDeadLettered]+outcomes[acemq.OutcomeRejected], "outcomes: %v", outcomes)
		assert.Equal(t, before+during+again, outcomes[acemq.OutcomeAcked], "outcomes: %v", outcomes)
		// A message handled twice is one the broker delivered again after
		// its retry copy was safe: at least once. RabbitMQ's quorum queues
		// can drop acks sent just before a channel closes (rabbitmq-server
		// issue 10327), and each stop of a subscription closes one: seen as
		// the 3 deliveries of a failed probe coming back.
		assert.LessOrEqual(t, again, 4*(logs.count(logTripped)+logs.count(logProbing)), "deliveries handled again")
		t.Logf("%d messages sent, %d handled (%d of them again), outcomes %v; %d trip(s), %d probe(s) of which %d failed; paused about %v after the trip",
			before+during, len(handled), again, outcomes, logs.count(logTripped), logs.count(logProbing), logs.count(logProbeFailed), paused.Round(time.Millisecond))
	})
}

// TestPauseAndResume pauses a consumer before Run and while it handles a
// delivery: the in-flight one settles, the prefetched ones go back without
// an attempt counted, and Resume brings them all through.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		got, opt := newSettlements()
		c := connectURL(t, url, opt)
		q := consumerQueue(t, url, acemq.DefaultRetryPolicy())
		release := make(chan struct{})
		var blocked atomic.Bool
		started := make(chan string, 100)
		cons, err := acemq.NewConsumer(c, q, func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			started <- m.Payload.OrderID
			if m.Payload.OrderID == "slow" && blocked.CompareAndSwap(false, true) {
				<-release
			}
			return acemq.Done()
		})
		require.NoError(t, err)
		cons.Pause()
		cons.Pause() // idempotent
		run(t, cons)
		pub := acemq.NewPublisher[OrderPlaced](c, "", q)
		require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "early"}))
		eventually(t, "Health to say the consumer is paused", func() bool {
			return healthSays(c, fmt.Sprintf("consumer of %q paused by Pause since ", q))
		})
		got.none(t)
		cons.Resume()
		cons.Resume() // idempotent
		assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
		assert.Equal(t, "early", <-started)
		require.NoError(t, c.Health(ctxT(t)))

		// Pause while one delivery runs and others wait behind it.
		require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "slow"}))
		assert.Equal(t, "slow", <-started)
		for i := range 5 {
			require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: fmt.Sprint(i)}))
		}
		cons.Pause()
		close(release)
		s := got.next(t)
		assert.Equal(t, acemq.OutcomeAcked, s.Outcome, "the in-flight delivery settles as usual")
		eventually(t, "the prefetched deliveries to go back to the queue", func() bool {
			info, err := c.Transport().Inspect(context.Background(), q)
			return err == nil && info.Messages == 5
		})
		got.none(t)
		cons.Resume()
		for range 5 {
			s := got.next(t)
			assert.Equal(t, acemq.OutcomeAcked, s.Outcome)
			assert.Equal(t, 1, s.Attempt, "going back to the queue is not an attempt")
		}
	})
}

// TestShutdownWhilePaused checks that neither a Pause nor a tripped kill
// switch holds Shutdown up.
func TestShutdownWhilePaused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		trip bool
	}{{"by Pause", false}, {"by the kill switch", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			onBrokers(t, func(t *testing.T, url string) {
				got, opt := newSettlements()
				c := connectURL(t, url, opt)
				q := consumerQueue(t, url, acemq.DefaultRetryPolicy())
				cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
					return acemq.Retry(errors.New("down"))
				}, acemq.KillSwitch(acemq.KillSwitchPolicy{MinFailures: 1, CoolDown: time.Hour}))
				require.NoError(t, err)
				done := make(chan error, 1)
				go func() { done <- cons.Run(context.Background()) }()
				if tc.trip {
					require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
					got.next(t)
				} else {
					cons.Pause()
				}
				eventually(t, "Health to say the consumer is paused", func() bool { return healthSays(c, "paused by") })
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				require.NoError(t, c.Shutdown(ctx), "Shutdown did not finish before its ctx ended")
				assert.ErrorIs(t, <-done, acemq.ErrClosed)
			})
		})
	}
}

// TestPauseResumeRace hammers Pause and Resume from other goroutines while
// messages flow; under -race it proves them safe, and afterwards every
// message has been handled exactly as asked, none lost.
func TestPauseResumeRace(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := consumerQueue(t, url, acemq.DefaultRetryPolicy())
		var mu sync.Mutex
		handled := map[string]bool{}
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			mu.Lock()
			handled[m.Payload.OrderID] = true
			mu.Unlock()
			return acemq.Done()
		}, acemq.Concurrency(4), acemq.KillSwitch(acemq.KillSwitchPolicy{}))
		require.NoError(t, err)
		r := acemq.NewRouter(c, consumerQueue(t, url, acemq.DefaultRetryPolicy()))
		acemq.Route(r, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
		run(t, cons)
		run(t, r)
		const n = 300
		batch := make([]OrderPlaced, n)
		for i := range batch {
			batch[i].OrderID = fmt.Sprint(i)
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 200 {
					if (i+g)%2 == 0 {
						cons.Pause()
						r.Pause()
					} else {
						cons.Resume()
						r.Resume()
					}
					_ = c.Health(context.Background())
				}
			})
		}
		for _, res := range acemq.NewPublisher[OrderPlaced](c, "", q).SendAll(ctxT(t), batch) {
			require.NoError(t, res.Err)
		}
		wg.Wait()
		cons.Resume()
		r.Resume()
		eventually(t, "every message to be handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == n
		})
		require.NoError(t, c.Health(ctxT(t)))
		empty(t, c, acemq.DeadLetterQueue(q))
	})
}

// TestRouterPauses checks that a Router pauses, by hand and by its kill
// switch, as a Consumer does, and that Health names it a router.
func TestRouterPauses(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		got, opt := newSettlements()
		c := connectURL(t, url, opt)
		q := consumerQueue(t, url, acemq.DefaultRetryPolicy())
		r := acemq.NewRouter(c, q, acemq.KillSwitch(acemq.KillSwitchPolicy{MinFailures: 2, Threshold: 0.5, CoolDown: time.Hour}))
		acemq.Route(r, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			if m.Payload.OrderID == "boom" {
				panic("the database driver panicked")
			}
			return acemq.Done()
		})
		r.Pause()
		run(t, r)
		pub := acemq.NewPublisher[OrderPlaced](c, "", q)
		require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "ok"}))
		eventually(t, "Health to name the paused router", func() bool {
			return healthSays(c, fmt.Sprintf("router of %q paused by Pause since ", q))
		})
		r.Resume()
		assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
		for range 2 {
			require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "boom"}))
			assert.Equal(t, acemq.OutcomeRejected, got.next(t).Outcome, "a panic is a rejection, and a failure to the kill switch")
		}
		eventually(t, "the kill switch to pause the router", func() bool {
			return healthSays(c, fmt.Sprintf("router of %q paused by the kill switch since ", q))
		})
		r.Resume() // ends the trip without a probe
		require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "ok"}))
		assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
		require.NoError(t, c.Health(ctxT(t)))
	})
}

// healthLogger is a log handler that asks for the Conn's health at every
// line, as a handler feeding a status page might.
type healthLogger struct {
	c     atomic.Pointer[acemq.Conn]
	lines atomic.Int64
}

func (h *healthLogger) Enabled(context.Context, slog.Level) bool { return true }
func (h *healthLogger) Handle(context.Context, slog.Record) error {
	if c := h.c.Load(); c != nil {
		_ = c.Health(context.Background())
	}
	h.lines.Add(1)
	return nil
}
func (h *healthLogger) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *healthLogger) WithGroup(string) slog.Handler      { return h }

// TestLogHandlerMayCallHealth checks that the kill switch and Pause log
// outside their lock: a log handler that calls Health does not deadlock.
func TestLogHandlerMayCallHealth(t *testing.T) {
	t.Parallel()
	h := &healthLogger{}
	got, opt := newSettlements()
	c := connect(t, opt, acemq.WithLogger(slog.New(h)))
	h.c.Store(c)
	q := acemqtestQueue(t)
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		return acemq.Retry(errors.New("down"))
	}, acemq.KillSwitch(acemq.KillSwitchPolicy{MinFailures: 1, CoolDown: time.Millisecond}))
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	got.next(t)
	eventually(t, "Health to say the consumer is paused", func() bool { return healthSays(c, "paused by the kill switch") })
	cons.Pause()
	cons.Resume()
	eventually(t, "the trip, Pause and Resume to be logged", func() bool { return h.lines.Load() >= 3 })
}

// TestKillSwitchBacksOff checks the wait between probes: it doubles with
// each failed probe, from CoolDown, and stops at 8×CoolDown.
func TestKillSwitchBacksOff(t *testing.T) {
	t.Parallel()
	logs := newLogCounter()
	c := connect(t, acemq.WithLogger(slog.New(logs)))
	q := acemqtestQueue(t)
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		return acemq.Retry(errors.New("down"))
	}, acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 100, Delays: []time.Duration{time.Hour}}),
		acemq.KillSwitch(acemq.KillSwitchPolicy{MinFailures: 1, CoolDown: 10 * time.Millisecond}))
	require.NoError(t, err)
	batch := make([]OrderPlaced, 40)
	for _, r := range acemq.NewPublisher[OrderPlaced](c, "", q).SendAll(ctxT(t), batch) {
		require.NoError(t, r.Err)
	}
	run(t, cons)
	eventually(t, "six probes to fail", func() bool { return logs.count(logProbeFailed) >= 6 })
	var waits []string
	for _, line := range logs.all() {
		if rest, ok := strings.CutPrefix(line, logProbeFailed); ok {
			_, wait, _ := strings.Cut(rest, "next_probe_in=")
			waits = append(waits, wait)
		}
	}
	assert.Equal(t, []string{"20ms", "40ms", "80ms", "80ms", "80ms", "80ms"}, waits[:6])
	empty(t, c, acemq.DeadLetterQueue(q))
}

// TestPauseAfterRun pauses a consumer whose Run has returned: the next Run
// starts paused, and Resume lets it take the message waiting for it.
func TestPauseAfterRun(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	c := connect(t, opt)
	q := acemqtestQueue(t)
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, cons.Run(ctx)) // a Run that ends at once
	cons.Pause()
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "waits"}))
	eventually(t, "Health to say the consumer is paused", func() bool { return healthSays(c, "paused by Pause") })
	got.none(t)
	cons.Resume()
	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	require.NoError(t, c.Health(ctxT(t)))
}

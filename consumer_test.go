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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewConsumerDeclaresItsQueues(t *testing.T) {
	t.Parallel()
	c := connect(t, acemq.WithRetryPolicy(acemq.RetryPolicy{Delays: []time.Duration{200 * time.Millisecond, 5 * time.Second, 2 * time.Minute, 5 * time.Second}}))
	q := acemqtestQueue(t)
	_, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
	require.NoError(t, err)
	for _, name := range []string{q, q + ".dlq", q + ".parked", q + ".retry.200ms", q + ".retry.5s", q + ".retry.2m0s"} {
		_, err := c.Transport().Inspect(ctxT(t), name)
		assert.NoError(t, err, name)
	}
	// Routable at once.
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
}

// NewConsumer's declarations run with the ctx DeclareContext gives: one
// that has ended fails it, declaring nothing, and a live one leaves the
// queue routable at once.
func TestNewConsumerDeclaresWithTheCallersCtx(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() }
	for _, b := range []struct {
		name string
		url  func(testing.TB) string
	}{{"memory", acemqtest.Memory}, {"rabbitmq", acemqtest.RabbitMQ}} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			url := b.url(t)
			c := connectURL(t, url)
			q := acemqtestQueue(t)
			acemqtest.DeleteQueuesAfter(t, url, q, q+".dlq", q+".parked")

			ended, cancel := context.WithCancel(ctxT(t))
			cancel()
			_, err := acemq.NewConsumer(c, q, h, acemq.DeclareContext(ended))
			require.ErrorIs(t, err, context.Canceled)
			assert.Contains(t, err.Error(), "acemq: ")
			_, err = c.Transport().Inspect(ctxT(t), q)
			assert.Error(t, err, "a declaration ran after its ctx ended")

			_, err = acemq.NewConsumer(c, q, h, acemq.DeclareContext(ctxT(t)), acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 1}))
			require.NoError(t, err)
			require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
		})
	}
}

func TestNewConsumerRefusesBadInput(t *testing.T) {
	t.Parallel()
	c := connect(t)
	h := func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() }
	var nilCtx context.Context // what a caller's unset field passes: DeclareContext must refuse it
	for _, tc := range []struct {
		name  string
		queue string
		h     acemq.Handler[OrderPlaced]
		opts  []acemq.ConsumerOption
		want  string
	}{
		{"empty queue", "", h, nil, "empty queue name"},
		{"nil handler", "q", nil, nil, "nil handler"},
		{"zero concurrency", "q", h, []acemq.ConsumerOption{acemq.Concurrency(0)}, "Concurrency(0)"},
		{"negative prefetch", "q", h, []acemq.ConsumerOption{acemq.Prefetch(-1)}, "Prefetch(-1)"},
		{"nil declare ctx", "q", h, []acemq.ConsumerOption{acemq.DeclareContext(nilCtx)}, "DeclareContext was given a nil ctx"},
		{"bad delay", "q", h, []acemq.ConsumerOption{acemq.WithConsumerRetry(acemq.RetryPolicy{Delays: []time.Duration{time.Microsecond}})}, "Delays[0]"},
		{"prefetch over 16 bits", "q", h, []acemq.ConsumerOption{acemq.Prefetch(65536)}, "Prefetch(65536): want 1 to 65535"},
		{"zero max body", "q", h, []acemq.ConsumerOption{acemq.MaxBodySize(0)}, "MaxBodySize(0): want 1 or more"},
		{"bind to the default exchange", "q", h, []acemq.ConsumerOption{acemq.Bind("", "q")}, `Bind("", "q"): the default exchange takes no bindings`},
		{"bind with a long key", "q", h, []acemq.ConsumerOption{acemq.Bind("orders", strings.Repeat("k", 256))}, "a key of 256: want at most 255 bytes each"},
		{"empty accepted type", "q", h, []acemq.ConsumerOption{acemq.AcceptTypes("A", "")}, "AcceptTypes was given an empty name"},
		{"long accepted type", "q", h, []acemq.ConsumerOption{acemq.AcceptTypes(strings.Repeat("t", 256))}, "AcceptTypes was given a name of 256 bytes; a type has at most 255"},
		{"too many partitions", "q", h, []acemq.ConsumerOption{acemq.Ordered(acemq.OrderPolicy{Partitions: 1025})}, "OrderPolicy.Partitions is 1025, want 1 to 1024"},
		{"negative kill switch window", "q", h, []acemq.ConsumerOption{acemq.KillSwitch(acemq.KillSwitchPolicy{Window: -time.Second})}, "KillSwitchPolicy.Window is -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := acemq.NewConsumer(c, tc.queue, tc.h, tc.opts...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "acemq: ")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestTheLadder(t *testing.T) {
	t.Parallel()
	errFlaky := errors.New("the warehouse is busy")
	for _, tc := range []struct {
		name     string
		handle   func(attempt int) acemq.Ack
		outcomes []acemq.Outcome
		reason   string // of the last settlement
		dlq      bool
		parked   bool
	}{
		{name: "Done acks", handle: func(int) acemq.Ack { return acemq.Done() },
			outcomes: []acemq.Outcome{acemq.OutcomeAcked}},
		{name: "Retry succeeds on the third attempt",
			handle: func(a int) acemq.Ack {
				if a < 3 {
					return acemq.Retry(errFlaky)
				}
				return acemq.Done()
			},
			outcomes: []acemq.Outcome{acemq.OutcomeRetried, acemq.OutcomeRetried, acemq.OutcomeAcked}},
		{name: "Retry gives up when the attempts are spent", handle: func(int) acemq.Ack { return acemq.Retry(errFlaky) },
			outcomes: []acemq.Outcome{acemq.OutcomeRetried, acemq.OutcomeRetried, acemq.OutcomeDeadLettered},
			reason:   "gave up after 3 attempts: the warehouse is busy", dlq: true},
		{name: "RetryAfter", handle: func(a int) acemq.Ack {
			if a == 1 {
				return acemq.RetryAfter(15*time.Millisecond, errFlaky)
			}
			return acemq.Done()
		}, outcomes: []acemq.Outcome{acemq.OutcomeRetried, acemq.OutcomeAcked}},
		{name: "Reject", handle: func(int) acemq.Ack { return acemq.Reject(errors.New("no such customer")) },
			outcomes: []acemq.Outcome{acemq.OutcomeRejected}, reason: "the handler rejected it: no such customer", dlq: true},
		{name: "AckOf nil", handle: func(int) acemq.Ack { return acemq.AckOf(nil) },
			outcomes: []acemq.Outcome{acemq.OutcomeAcked}},
		{name: "AckOf error retries", handle: func(a int) acemq.Ack {
			if a == 1 {
				return acemq.AckOf(errFlaky)
			}
			return acemq.AckOf(nil)
		}, outcomes: []acemq.Outcome{acemq.OutcomeRetried, acemq.OutcomeAcked}},
		{name: "AckOf Fatal dead-letters at once", handle: func(int) acemq.Ack {
			return acemq.AckOf(fmt.Errorf("order: %w", acemq.Fatal(errors.New("the order is malformed"))))
		}, outcomes: []acemq.Outcome{acemq.OutcomeDeadLettered}, reason: "order: the order is malformed", dlq: true},
		{name: "Retry of a Fatal dead-letters at once", handle: func(int) acemq.Ack {
			return acemq.Retry(acemq.Fatal(errors.New("cannot be fixed")))
		}, outcomes: []acemq.Outcome{acemq.OutcomeDeadLettered}, reason: "cannot be fixed", dlq: true},
		{name: "a panic is a rejection", handle: func(int) acemq.Ack { panic("nil map") },
			outcomes: []acemq.Outcome{acemq.OutcomeRejected}, reason: "the handler panicked: nil map", dlq: true},
		{name: "Park parks at once", handle: func(int) acemq.Ack { return acemq.Park(errors.New("state v3 is unknown")) },
			outcomes: []acemq.Outcome{acemq.OutcomeParked}, reason: "the handler parked it: state v3 is unknown", parked: true},
		{name: "the zero Ack is a rejection", handle: func(int) acemq.Ack { return acemq.Ack{} },
			outcomes: []acemq.Outcome{acemq.OutcomeRejected}, reason: "the handler returned no Ack (use Done, Retry, Reject or AckOf)", dlq: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, opt := newSettlements()
			c := connect(t, opt, acemq.WithRetryPolicy(fastRetry))
			q := acemqtestQueue(t)
			var (
				mu     sync.Mutex
				seenID []string
			)
			cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
				mu.Lock()
				seenID = append(seenID, m.Envelope.ID)
				mu.Unlock()
				return tc.handle(m.Envelope.Attempt)
			})
			require.NoError(t, err)
			run(t, cons)
			require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "7"}, acemq.MessageID("order-7")))

			var last acemq.Settlement
			for i, want := range tc.outcomes {
				last = got.next(t)
				assert.Equal(t, want, last.Outcome, "settlement %d", i)
				assert.Equal(t, i+1, last.Attempt, "settlement %d", i)
				assert.Equal(t, "order-7", last.Envelope.ID, "the ID stays the same across the ladder")
				if want == acemq.OutcomeRetried {
					assert.Equal(t, errFlaky.Error(), last.Reason)
					assert.Positive(t, last.Delay)
				}
			}
			got.none(t)
			if tc.reason != "" {
				assert.Equal(t, tc.reason, last.Reason)
			}
			if tc.dlq {
				dl := take(t, c, acemq.DeadLetterQueue(q))
				assert.Equal(t, "order-7", dl.MessageID)
				assert.Equal(t, tc.reason, dl.Headers["x-acemq-error"])
				dlEnv, err := acemq.EnvelopeOf(dl.Message)
				require.NoError(t, err)
				assert.Equal(t, len(tc.outcomes), dlEnv.Attempt)
				assert.JSONEq(t, `{"orderId":"7","totalCents":0}`, string(dl.Body), "the original body is kept")
			} else {
				empty(t, c, acemq.DeadLetterQueue(q))
			}
			if tc.parked {
				p := take(t, c, acemq.ParkingQueue(q))
				assert.Equal(t, "order-7", p.MessageID)
				assert.Equal(t, tc.reason, p.Headers["x-acemq-error"])
				assert.False(t, last.DeadLetters(), "a park is not a dead letter")
				assert.Equal(t, acemq.AckPark, last.Ack.Kind())
			} else {
				empty(t, c, acemq.ParkingQueue(q))
			}
			empty(t, c, q)
			mu.Lock()
			assert.Len(t, seenID, len(tc.outcomes))
			mu.Unlock()
		})
	}
}

func TestRetryDelaysFollowThePolicyAndTiers(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	policy := acemq.RetryPolicy{MaxAttempts: 4, Delays: []time.Duration{10 * time.Millisecond, 30 * time.Millisecond}}
	c := connect(t, opt, acemq.WithRetryPolicy(policy))
	q := acemqtestQueue(t)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		switch m.Envelope.Attempt {
		case 1:
			return acemq.Retry(errors.New("first"))
		case 2:
			return acemq.Retry(errors.New("second"))
		case 3:
			return acemq.RetryAfter(11*time.Millisecond, errors.New("asked")) // rounds up to 30ms
		}
		return acemq.RetryAfter(time.Hour, errors.New("too late"))
	})
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	for i, want := range []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond} {
		s := got.next(t)
		require.Equal(t, acemq.OutcomeRetried, s.Outcome)
		assert.Equal(t, want, s.Delay, "delay before attempt %d", i+2)
	}
	s := got.next(t)
	assert.Equal(t, acemq.OutcomeDeadLettered, s.Outcome)
	assert.Equal(t, "gave up after 4 attempts: too late", s.Reason)
	assert.Zero(t, s.Delay)
}

func TestCorrelationAndCausationFromTheHandlersContext(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	c := connect(t, opt)
	in, out, out2 := acemqtestQueue(t), acemqtestQueue(t)+".out", acemqtestQueue(t)+".out2"
	declareQueueNamed(t, c, out)
	declareQueueNamed(t, c, out2)
	next := acemq.NewPublisher[OrderPlaced](c, "", out)
	next2 := acemq.NewPublisher[OrderPlaced](c, "", out2)
	cons, err := acemq.NewConsumer(c, in, func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		if err := next.Send(ctx, m.Payload); err != nil {
			return acemq.Retry(err)
		}
		return acemq.AckOf(next2.Send(ctx, m.Payload, acemq.CorrelationID("given"), acemq.CausationID("given-cause")))
	})
	require.NoError(t, err)
	run(t, cons)
	pub := acemq.NewPublisher[OrderPlaced](c, "", in)
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{}, acemq.MessageID("m1")))
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{}, acemq.MessageID("m2"), acemq.CorrelationID("conv")))
	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)

	d1, d2 := take(t, c, out), take(t, c, out)
	assert.Equal(t, "m1", d1.CorrelationID, "without one, the incoming ID correlates")
	assert.Equal(t, "m1", d1.Headers["x-acemq-causation-id"])
	assert.Equal(t, "conv", d2.CorrelationID)
	assert.Equal(t, "m2", d2.Headers["x-acemq-causation-id"])
	given := take(t, c, out2)
	assert.Equal(t, "given", given.CorrelationID, "options win")
	assert.Equal(t, "given-cause", given.Headers["x-acemq-causation-id"])

	// Outside a handler nothing is implied.
	require.NoError(t, next.Send(ctxT(t), OrderPlaced{}))
	assert.NotContains(t, take(t, c, out).Headers, "x-acemq-causation-id")
}

func TestOnSettledAndWhenSettled(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		trail []string
	)
	record := func(s string) { mu.Lock(); trail = append(trail, s); mu.Unlock() }
	done := make(chan struct{}, 4)
	c := connect(t,
		acemq.WithConsumeInterceptor(func(ctx context.Context, _ *acemq.ConsumeContext) error {
			acemq.WhenSettled(ctx, func(_ context.Context, s acemq.Settlement) { record("interceptor:" + string(s.Outcome)) })
			return nil
		}),
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { record("hook1:" + string(s.Outcome)) }),
		acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { record("hook2:" + s.Reason); done <- struct{}{} }))
	q := acemqtestQueue(t)
	cons, err := acemq.NewConsumer(c, q, func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		acemq.WhenSettled(ctx, func(_ context.Context, s acemq.Settlement) { record("handler:" + s.Ack.String()) })
		return acemq.Reject(errors.New("nope"))
	})
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	<-done
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{
		"handler:reject", // last registered runs first
		"interceptor:rejected",
		"hook1:rejected",
		"hook2:the handler rejected it: nope",
	}, trail)
	// Outside a delivery WhenSettled does nothing and does not panic.
	acemq.WhenSettled(context.Background(), func(context.Context, acemq.Settlement) { t.Error("ran") })
}

func TestConsumerRunTwiceAtOnceFails(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	c := connect(t, opt)
	q := acemqtestQueue(t)
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	got.next(t) // the first Run is consuming
	err = cons.Run(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "already running")
}

func TestConcurrencyRunsWorkersInParallel(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	c := connect(t, opt)
	q := acemqtestQueue(t)
	var inside, peak atomic.Int32
	release := make(chan struct{})
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		n := inside.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		inside.Add(-1)
		return acemq.Done()
	}, acemq.Concurrency(4))
	require.NoError(t, err)
	run(t, cons)
	pub := acemq.NewPublisher[OrderPlaced](c, "", q)
	for range 6 {
		require.NoError(t, pub.Send(ctxT(t), OrderPlaced{}))
	}
	require.Eventually(t, func() bool { return peak.Load() == 4 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	assert.EqualValues(t, 4, peak.Load(), "more handlers ran at once than Concurrency allows")
	close(release)
	for range 6 {
		assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	}
}

// A move that keeps failing (here: its dead-letter queue was deleted) must
// not spin: the delivery goes back to its queue after a growing pause, and
// settles once the target is back.
func TestFailedMovesBackOff(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	c := connect(t, opt)
	q := acemqtestQueue(t)
	var handled atomic.Int32
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		handled.Add(1)
		return acemq.Reject(errors.New("no"))
	})
	require.NoError(t, err)
	require.NoError(t, c.Transport().DeleteQueue(ctxT(t), acemq.DeadLetterQueue(q)))
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	time.Sleep(600 * time.Millisecond)
	n := handled.Load()
	assert.GreaterOrEqual(t, n, int32(2), "the delivery came back after the failed move")
	assert.LessOrEqual(t, n, int32(12), "the consumer spun on a move that cannot succeed (%d attempts in 600ms)", n)
	got.none(t) // a requeue is not a settlement
	require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: acemq.DeadLetterQueue(q)}))
	s := got.next(t)
	assert.Equal(t, acemq.OutcomeRejected, s.Outcome, "once the target is back the move succeeds")
	take(t, c, acemq.DeadLetterQueue(q))
}

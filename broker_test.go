package acemq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// onBrokers runs fn once on the memory transport and once on RabbitMQ (which
// skips loudly when no broker answers, and fails under
// ACEMQ_REQUIRE_BROKER=1), so the engine is proved on both.
func onBrokers(t *testing.T, fn func(t *testing.T, url string)) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		fn(t, acemqtest.Memory(t))
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		fn(t, acemqtest.RabbitMQ(t))
	})
}

// consumerQueue names a queue and deletes it, its .dlq, .parked and the
// given retry tiers when the test ends.
func consumerQueue(t *testing.T, url string, p acemq.RetryPolicy) string {
	q := acemqtestQueue(t)
	names := []string{q}
	for _, d := range p.Delays {
		names = append(names, acemq.RetryQueue(q, d))
	}
	acemqtest.DeleteQueuesAfter(t, url, names...)
	return q
}

func TestEngineOnBrokers(t *testing.T) {
	t.Parallel()
	policy := acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}}
	t.Run("ladder", func(t *testing.T) {
		t.Parallel()
		onBrokers(t, func(t *testing.T, url string) {
			got, opt := newSettlements()
			c := connectURL(t, url, opt, acemq.WithRetryPolicy(policy))
			q := consumerQueue(t, url, policy)
			cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
				if m.Payload.OrderID == "doomed" || m.Envelope.Attempt < 3 {
					return acemq.Retry(errors.New("not yet"))
				}
				return acemq.Done()
			})
			require.NoError(t, err)
			run(t, cons)
			pub := acemq.NewPublisher[OrderPlaced](c, "", q)
			require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "late"}, acemq.MessageID("late")))
			require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "doomed"}, acemq.MessageID("doomed")))
			byID := map[string][]acemq.Settlement{}
			for range 6 {
				s := got.next(t)
				byID[s.Envelope.ID] = append(byID[s.Envelope.ID], s)
			}
			got.none(t)
			for id, final := range map[string]acemq.Outcome{"late": acemq.OutcomeAcked, "doomed": acemq.OutcomeDeadLettered} {
				ss := byID[id]
				require.Len(t, ss, 3, id)
				for i, s := range ss {
					assert.Equal(t, i+1, s.Attempt, id)
				}
				assert.Equal(t, acemq.OutcomeRetried, ss[0].Outcome)
				assert.Equal(t, 50*time.Millisecond, ss[0].Delay)
				assert.Equal(t, 100*time.Millisecond, ss[1].Delay)
				assert.Equal(t, final, ss[2].Outcome, id)
			}
			dl := take(t, c, acemq.DeadLetterQueue(q))
			assert.Equal(t, "doomed", dl.MessageID)
			assert.Equal(t, "gave up after 3 attempts: not yet", dl.Headers["x-acemq-error"])
		})
	})
	t.Run("refusal and parking", func(t *testing.T) {
		t.Parallel()
		onBrokers(t, func(t *testing.T, url string) {
			got, opt := newSettlements()
			c := connectURL(t, url, opt, acemq.WithRetryPolicy(policy),
				acemq.WithConsumeInterceptor(func(_ context.Context, cc *acemq.ConsumeContext) error {
					if cc.Envelope.Headers["x-tenant"] == "beta" {
						return errors.New("wrong tenant")
					}
					return nil
				}))
			q := consumerQueue(t, url, policy)
			cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
			require.NoError(t, err)
			run(t, cons)
			require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}, acemq.Header("x-tenant", "beta")))
			s := got.next(t)
			assert.Equal(t, acemq.OutcomeDeadLettered, s.Outcome)
			assert.Equal(t, "an interceptor refused it: wrong tenant", s.Reason)
			require.NoError(t, c.Transport().Publish(ctxT(t), transport.Message{RoutingKey: q, ContentType: "application/json", Body: []byte("{"),
				Headers: map[string]any{"x-acemq-attempt": "abc"}}))
			s = got.next(t)
			assert.Equal(t, acemq.OutcomeParked, s.Outcome)
			assert.Contains(t, s.Reason, "x-acemq-attempt")
			p := take(t, c, acemq.ParkingQueue(q))
			assert.Equal(t, "abc", p.Headers["x-acemq-attempt"])
			assert.Equal(t, "{", string(p.Body))
		})
	})
	t.Run("quorum", func(t *testing.T) {
		t.Parallel()
		onBrokers(t, func(t *testing.T, url string) {
			got, opt := newSettlements()
			c := connectURL(t, url, opt, acemq.WithRetryPolicy(policy))
			q := consumerQueue(t, url, policy)
			cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
				if m.Envelope.Attempt < 2 {
					return acemq.Retry(errors.New("once more"))
				}
				return acemq.Done()
			}, acemq.Quorum())
			require.NoError(t, err)
			run(t, cons)
			require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
			assert.Equal(t, acemq.OutcomeRetried, got.next(t).Outcome)
			assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
			// Declaring the same queue as classic now conflicts: it is a quorum queue.
			err = c.Declare(ctxT(t), acemq.Queue{Name: q})
			assert.ErrorIs(t, err, transport.ErrTopologyConflict)
		})
	})
	t.Run("unroutable", func(t *testing.T) {
		t.Parallel()
		onBrokers(t, func(t *testing.T, url string) {
			c := connectURL(t, url)
			err := acemq.NewPublisher[OrderPlaced](c, "", acemqtestQueue(t)).Send(ctxT(t), OrderPlaced{})
			assert.ErrorIs(t, err, acemq.ErrUnroutable)
		})
	})
	t.Run("declaring over other arguments", func(t *testing.T) {
		t.Parallel()
		onBrokers(t, func(t *testing.T, url string) {
			c := connectURL(t, url)
			q := consumerQueue(t, url, policy)
			require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: q, Args: map[string]any{"x-max-length": int32(10)}}))
			_, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
			require.Error(t, err)
			assert.Contains(t, err.Error(), q)
			assert.ErrorIs(t, err, transport.ErrTopologyConflict)
		})
	})
	t.Run("graceful stop", func(t *testing.T) {
		t.Parallel()
		onBrokers(t, func(t *testing.T, url string) {
			got, opt := newSettlements()
			c := connectURL(t, url, opt, acemq.WithRetryPolicy(policy))
			q := consumerQueue(t, url, policy)
			started := make(chan struct{}, 64)
			release := make(chan struct{})
			cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
				started <- struct{}{}
				<-release
				return acemq.Done()
			}, acemq.Concurrency(2), acemq.Prefetch(20))
			require.NoError(t, err)
			results := acemq.NewPublisher[OrderPlaced](c, "", q).SendAll(ctxT(t), make([]OrderPlaced, 20))
			for _, r := range results {
				require.NoError(t, r.Err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- cons.Run(ctx) }()
			<-started
			<-started
			time.Sleep(100 * time.Millisecond) // let the prefetch fill
			cancel()
			close(release)
			require.NoError(t, <-done)
			assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
			assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
			got.none(t)
			require.Eventually(t, func() bool {
				info, err := c.Transport().Inspect(ctxT(t), q)
				return err == nil && info.Messages == 18
			}, 5*time.Second, 20*time.Millisecond, "the 18 unstarted deliveries went back to the queue")
		})
	})
}

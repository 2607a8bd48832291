package acemqtest_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/internal/ordering"
	"github.com/acemq/acemq/transport"
)

// DeleteAfter leaves nothing of a consumer with a policy of its own, a
// router, and an exchange the test declared, on either broker, even when
// the test's Conn is closed before the cleanup runs.
func TestDeleteAfter(t *testing.T) {
	t.Parallel()
	for name, broker := range map[string]func(testing.TB) string{"memory": acemqtest.Memory, "rabbitmq": acemqtest.RabbitMQ} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := broker(t)
			var topo []acemq.Topology
			t.Run("inner", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				mq, err := acemq.Connect(ctx, url, acemq.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					t.Fatal(err)
				}
				defer mq.Close()
				x := acemq.Exchange{Name: acemqtest.QueueName(t, "events"), Kind: "topic"}
				if err := mq.Declare(ctx, x); err != nil {
					t.Fatal(err)
				}
				acemqtest.DeleteAfter(t, url, acemqtest.Declarations{x})
				policy := acemq.RetryPolicy{MaxAttempts: 2, Delays: []time.Duration{20 * time.Millisecond}}
				c, err := acemq.NewConsumer(mq, acemqtest.QueueName(t, "orders"),
					func(context.Context, *acemq.Message[string]) acemq.Ack { return acemq.Done() },
					acemq.WithConsumerRetry(policy), acemq.Bind(x.Name, "order.#"))
				if err != nil {
					t.Fatal(err)
				}
				r := acemq.NewRouter(mq, acemqtest.QueueName(t, "mixed"))
				invalid := acemq.NewRouter(mq, acemqtest.QueueName(t, "invalid"), acemq.Concurrency(0))
				acemqtest.DeleteAfter(t, url, c, r, invalid)
				topo = append(append(append(topo, c.Topology()...), r.Topology()...), x)

				// An ordered consumer that blocked a key: its held queue
				// is made on demand, named by no fixed list.
				oq := acemqtest.QueueName(t, "ledger")
				o, err := acemq.NewConsumer(mq, oq, func(context.Context, *acemq.Message[string]) acemq.Ack {
					return acemq.Reject(errors.New("no such account"))
				}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1, BlockOnFailure: true}))
				if err != nil {
					t.Fatal(err)
				}
				acemqtest.DeleteAfter(t, url, o)
				runCtx, stop := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- o.Run(runCtx) }()
				pub := acemq.NewPublisher[string](mq, oq, "")
				for _, s := range []string{"first", "held"} {
					if err := pub.Send(ctx, s, acemq.Key("acct-1")); err != nil {
						t.Fatal(err)
					}
				}
				for {
					keys, err := acemq.BlockedKeys(ctx, mq, oq)
					if err != nil {
						t.Fatal(err)
					}
					if len(keys) == 1 && keys[0].Held == 1 {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				stop()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				topo = append(topo, o.Topology()...)
				topo = append(topo, acemq.Queue{Name: ordering.HeldQueue(oq, "acct-1")})
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			mq, err := acemq.Connect(ctx, url, acemq.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			defer mq.Close()
			var queues int
			for _, it := range topo {
				switch v := it.(type) {
				case acemq.Queue:
					queues++
					if _, err := mq.Transport().Inspect(ctx, v.Name); !errors.Is(err, transport.ErrNotFound) {
						t.Errorf("queue %q is still there (%v)", v.Name, err)
						_ = mq.Transport().DeleteQueue(ctx, v.Name)
					}
				case acemq.Exchange:
					err := mq.Transport().Publish(ctx, transport.Message{Exchange: v.Name, RoutingKey: "order.new", Body: []byte(`""`)})
					if !errors.Is(err, transport.ErrNotFound) {
						t.Errorf("exchange %q is still there (%v)", v.Name, err)
						_ = mq.Transport().DeleteExchange(ctx, v.Name)
					}
				}
			}
			// The consumer's queue, .dlq, .parked, 1 tier; the router's
			// with 4 default tiers; the ordered one's partition, .dlq,
			// .parked, members, registry, status and the key's held queue.
			if queues != 4+7+7 {
				t.Errorf("%d queues checked, want 18", queues)
			}
		})
	}
}

package acemq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestErrorsCarryOnePrefix provokes the errors of publishing and consuming
// on both transports and checks each reads "acemq: ..." once, with its
// cause still reachable through errors.Is.
func TestErrorsCarryOnePrefix(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := consumerQueue(t, url, acemq.DefaultRetryPolicy())
		handle := func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() }
		require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: q, Args: map[string]any{"x-max-length": int32(10)}}))
		_, conflict := acemq.NewConsumer(c, q, handle)
		for _, tc := range []struct {
			name string
			err  error
			is   error
		}{
			{"unroutable", acemq.NewPublisher[OrderPlaced](c, "", acemqtestQueue(t)).Send(ctxT(t), OrderPlaced{}), acemq.ErrUnroutable},
			{"no such exchange", acemq.NewPublisher[OrderPlaced](c, acemqtest.QueueName(t, "nx"), "k").Send(ctxT(t), OrderPlaced{}), transport.ErrNotFound},
			{"a declaration that conflicts", conflict, transport.ErrTopologyConflict},
			{"a declaration that conflicts, through Declare", c.Declare(ctxT(t), acemq.Queue{Name: q}), transport.ErrTopologyConflict},
			{"a bad option", func() error {
				_, err := acemq.NewConsumer(c, q, handle, acemq.Concurrency(0), acemq.Prefetch(0))
				return err
			}(), nil},
			{"NoDeclare and nothing there", func() error {
				cons, err := acemq.NewConsumer(c, acemqtestQueue(t), handle, acemq.NoDeclare())
				require.NoError(t, err)
				return cons.Run(ctxT(t))
			}(), nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				require.Error(t, tc.err)
				assert.True(t, strings.HasPrefix(tc.err.Error(), "acemq: "), "%q", tc.err)
				assert.Equal(t, 1, countPrefix(tc.err.Error()), "one acemq: prefix in %q", tc.err)
				if tc.is != nil {
					assert.ErrorIs(t, tc.err, tc.is)
				}
			})
		}
	})
}

// TestAnEndedContextReadsTheSameOnBothTransports gives Send, PublishRaw,
// Declare and Health a cancelled and an expired ctx on memory and on
// RabbitMQ: each error wraps ctx's error, and the words are the same.
func TestAnEndedContextReadsTheSameOnBothTransports(t *testing.T) {
	t.Parallel()
	url := acemqtest.RabbitMQ(t)
	q := acemqtestQueue(t)
	acemqtest.DeleteQueuesAfter(t, url, q)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, stop := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer stop()

	texts := map[string][]string{}
	for _, broker := range []struct{ name, url string }{{"memory", acemqtest.Memory(t)}, {"rabbitmq", url}} {
		c := connectURL(t, broker.url)
		require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: q}))
		pub := acemq.NewPublisher[OrderPlaced](c, "", q)
		for _, ctx := range []context.Context{cancelled, expired} {
			errs := []error{
				pub.Send(ctx, OrderPlaced{}, acemq.MessageID("m-1")),
				c.PublishRaw(ctx, acemq.RawMessage{RoutingKey: q, Envelope: &acemq.Envelope{ID: "m-2", Version: 1, Attempt: 1}, Body: []byte("{}")}),
				c.Declare(ctx, acemq.Queue{Name: q}),
				c.Health(ctx),
			}
			for i, err := range errs {
				require.ErrorIs(t, err, ctx.Err(), "%s, call %d", broker.name, i)
				assert.Equal(t, 1, countPrefix(err.Error()), "%q", err)
				texts[broker.name] = append(texts[broker.name], err.Error())
			}
		}
		empty(t, c, q)
	}
	assert.Equal(t, texts["memory"], texts["rabbitmq"])
	assert.Equal(t, `acemq: publishing m-1 to the default exchange with key "`+q+`": context canceled`, texts["memory"][0])
}

package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestErrorTexts provokes the errors of publishing, declaring and
// consuming on both transports and checks what each reads: the prefix of
// the package that made it, once, at the front; acemq's context; the
// transport's error (with its own prefix) as the cause, its text as the
// transport wrote it; and the sentinel still reachable through errors.Is.
func TestErrorTexts(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := consumerQueue(t, url, acemq.DefaultRetryPolicy())
		handle := func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() }
		require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: q, Args: map[string]any{"x-max-length": int32(10)}}))
		_, conflict := acemq.NewConsumer(c, q, handle)
		unroutable, nx, missing := acemqtestQueue(t), acemqtest.QueueName(t, "nx"), acemqtestQueue(t)
		id := `[0-9a-f-]{36}`
		quote := func(s string) string { return regexp.QuoteMeta(strconv.Quote(s)) }
		rabbit := strings.HasPrefix(url, "amqp")
		for _, tc := range []struct {
			name string
			err  error
			is   error
			want string // a regexp of the whole text, on memory
			rmq  string // on RabbitMQ, when it differs
		}{
			{
				name: "unroutable",
				err:  acemq.NewPublisher[OrderPlaced](c, "", unroutable).Send(ctxT(t), OrderPlaced{}),
				is:   acemq.ErrUnroutable,
				want: `acemq: publishing ` + id + `: memory: no queue took the message published to exchange "" \(the default exchange\) with routing key ` + quote(unroutable),
				rmq:  `acemq: publishing ` + id + `: rabbitmq: publish to exchange "", routing key ` + quote(unroutable) + `: no queue took the message \(312 NO_ROUTE\)`,
			},
			{
				name: "no such exchange",
				err:  acemq.NewPublisher[OrderPlaced](c, nx, "k").Send(ctxT(t), OrderPlaced{}),
				is:   transport.ErrNotFound,
				want: `acemq: publishing ` + id + ` to exchange ` + quote(nx) + ` with key "k": memory: publish: no exchange named ` + quote(nx),
				rmq: `acemq: publishing ` + id + ` to exchange ` + quote(nx) + ` with key "k": rabbitmq: publish to exchange ` + quote(nx) +
					`: Exception \(404\) Reason: "NOT_FOUND - no exchange '` + regexp.QuoteMeta(nx) + `' in vhost '/'"`,
			},
			{
				name: "a declaration that conflicts",
				err:  conflict,
				is:   transport.ErrTopologyConflict,
				want: `acemq: declaring the queues of consumer ` + quote(q) + `: memory: queue ` + quote(q) + ` already exists with x-max-length 10, not absent`,
				rmq: `acemq: declaring the queues of consumer ` + quote(q) + `: rabbitmq: declare queue ` + quote(q) +
					`: Exception \(406\) Reason: "PRECONDITION_FAILED - inequivalent arg 'x-max-length' .*`,
			},
			{
				// Declare wraps the transport's error.
				name: "a declaration that conflicts, through Declare",
				err:  c.Declare(ctxT(t), acemq.Queue{Name: q}),
				is:   transport.ErrTopologyConflict,
				want: `acemq: declaring: memory: queue ` + quote(q) + ` already exists with x-max-length 10, not absent`,
				rmq: `acemq: declaring: rabbitmq: declare queue ` + quote(q) +
					`: Exception \(406\) Reason: "PRECONDITION_FAILED - inequivalent arg 'x-max-length' .*`,
			},
			{
				name: "bad options",
				err: func() error {
					_, err := acemq.NewConsumer(c, q, handle, acemq.Concurrency(0), acemq.Prefetch(0))
					return err
				}(),
				want: `acemq: consumer of ` + quote(q) + `: Concurrency\(0\): want 1 or more\nPrefetch\(0\): want 1 to 65535`,
			},
			{
				name: "NoDeclare and nothing there",
				err: func() error {
					cons, err := acemq.NewConsumer(c, missing, handle, acemq.NoDeclare())
					require.NoError(t, err)
					return cons.Run(ctxT(t))
				}(),
				want: `acemq: consumer of ` + quote(missing) + ` was given NoDeclare, but these queues do not exist: ` +
					regexp.QuoteMeta(missing) + `, .* \(declare them, or drop NoDeclare\)`,
			},
		} {
			t.Run(tc.name, func(t *testing.T) {
				require.Error(t, tc.err)
				want := tc.want
				if rabbit && tc.rmq != "" {
					want = tc.rmq
				}
				assert.Regexp(t, "^"+want+"$", tc.err.Error())
				assert.Equal(t, 1, countPrefix(tc.err.Error()), "acemq: more than once")
				if tc.is != nil {
					assert.ErrorIs(t, tc.err, tc.is)
				}
			})
		}
	})
}

// TestForeignErrorTextPassesThrough: acemq wraps a cause with %w and never
// edits its text, even where another package's words happen to read like
// acemq's own (": acemq: "), which the old prefix cleaning used to cut.
func TestForeignErrorTextPassesThrough(t *testing.T) {
	t.Parallel()
	foreign := errors.New("billing: charge 42: acemq: the upstream said so")
	c := connectURL(t, acemqtest.Memory(t), acemq.WithTransport(failingPublish{Transport: memory.New(t.Name()), err: foreign}))
	err := acemq.NewPublisher[OrderPlaced](c, "", "orders").Send(ctxT(t), OrderPlaced{}, acemq.MessageID("m-1"))
	require.ErrorIs(t, err, foreign)
	assert.Equal(t, `acemq: publishing m-1 to the default exchange with key "orders": billing: charge 42: acemq: the upstream said so`, err.Error())
}

// TestABareSentinelReadsWithOnePrefixEach: a transport that returns one
// of package transport's sentinels as it is gets acemq's context before
// it, as any cause does, and the text has one prefix per package; the
// error is errors.Is the sentinel and acemq's sentinel of its kind. An
// unroutable publish names where it went, since the bare sentinel does not.
func TestABareSentinelReadsWithOnePrefixEach(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ sentinel, is error }{
		{transport.ErrClosed, acemq.ErrClosed},
		{transport.ErrNacked, acemq.ErrNacked},
		{transport.ErrUnroutable, acemq.ErrUnroutable},
		{transport.ErrNotFound, acemq.ErrNotFound},
		{transport.ErrTopologyConflict, acemq.ErrTopologyConflict},
	} {
		c := connectURL(t, acemqtest.Memory(t), acemq.WithTransport(failingPublish{Transport: memory.New(t.Name()), err: tc.sentinel}))
		err := acemq.NewPublisher[OrderPlaced](c, "orders", "placed").Send(ctxT(t), OrderPlaced{}, acemq.MessageID("m-1"))
		require.ErrorIs(t, err, tc.sentinel)
		require.ErrorIs(t, err, tc.is)
		assert.Equal(t, `acemq: publishing m-1 to exchange "orders" with key "placed": `+tc.sentinel.Error(), err.Error())
		assert.True(t, strings.HasPrefix(tc.sentinel.Error(), "transport: "), tc.sentinel.Error())
		assert.Equal(t, 1, countPrefix(err.Error()), err.Error())
	}
}

// TestSentinelsOfBothPackages: acemq's sentinels read "acemq: " and
// package transport's "transport: "; each is errors.Is its counterpart,
// both ways, and no other.
func TestSentinelsOfBothPackages(t *testing.T) {
	t.Parallel()
	pairs := [][2]error{
		{acemq.ErrClosed, transport.ErrClosed},
		{acemq.ErrUnroutable, transport.ErrUnroutable},
		{acemq.ErrNacked, transport.ErrNacked},
		{acemq.ErrTopologyConflict, transport.ErrTopologyConflict},
		{acemq.ErrNotFound, transport.ErrNotFound},
	}
	for i, p := range pairs {
		assert.True(t, strings.HasPrefix(p[0].Error(), "acemq: "), p[0].Error())
		assert.Equal(t, strings.TrimPrefix(p[0].Error(), "acemq: "), strings.TrimPrefix(p[1].Error(), "transport: "))
		assert.ErrorIs(t, p[0], p[1])
		assert.ErrorIs(t, p[1], p[0])
		assert.ErrorIs(t, fmt.Errorf("rabbitmq: x: %w", p[1]), p[0])
		for j, q := range pairs {
			if i != j {
				assert.NotErrorIs(t, p[0], q[1])
				assert.NotErrorIs(t, p[1], q[0])
			}
		}
	}
	for _, err := range []error{transport.ErrLocked, transport.ErrMissingPlugin} {
		assert.True(t, strings.HasPrefix(err.Error(), "transport: "), err.Error())
	}
}

// failingPublish is a transport whose Publish fails with err.
type failingPublish struct {
	transport.Transport
	err error
}

func (f failingPublish) Publish(context.Context, transport.Message) error { return f.err }

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

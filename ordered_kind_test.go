package acemq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/patterns"
	"github.com/acemq/acemq/transport"
)

// notThere asserts that the broker has no queue name.
func notThere(t *testing.T, c *acemq.Conn, name string) {
	t.Helper()
	_, err := c.Transport().Inspect(ctxT(t), name)
	require.ErrorIs(t, err, transport.ErrNotFound, "queue %s", name)
}

// deleteTopologyAfter deletes what a consumer declared when the test ends,
// before its Conn closes.
func deleteTopologyAfter(t *testing.T, c *acemq.Conn, ts []acemq.Topology) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Delete(ctx, ts...); err != nil && !errors.Is(err, acemq.ErrClosed) {
			t.Errorf("deleting %v: %v", ts, err)
		}
	})
}

func ignoreStep(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() }

// Ordered on a name the broker has as a plain queue fails, at NewConsumer
// (or, for a Router and with NoDeclare, at Run), saying what exists and
// how to migrate, and declares nothing of its own.
func TestOrderedOnAPlainQueueFails(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := orderedQueue(t, url, 2)
		declareQueueNamed(t, c, q)
		ordered := acemq.Ordered(acemq.OrderPolicy{Partitions: 2})
		wants := func(t *testing.T, err error, who string) {
			t.Helper()
			require.Error(t, err)
			for _, want := range []string{
				`acemq: ordered ` + who + ` of "` + q + `": the broker has a plain queue "` + q + `"`,
				"the default exchange", "acemq replay " + q + " NEW", `delete "` + q + `"`,
				`docs/ordering.md, "Migrating a plain queue to ordered"`,
			} {
				require.ErrorContains(t, err, want)
			}
		}

		_, err := acemq.NewConsumer(c, q, ignoreStep, ordered)
		wants(t, err, "consumer")
		r := acemq.NewRouter(c, q, ordered)
		acemq.Route(r, ignoreStep)
		wants(t, r.Run(ctxT(t)), "router")
		cons, err := acemq.NewConsumer(c, q, ignoreStep, ordered, acemq.NoDeclare())
		require.NoError(t, err, "NoDeclare declares nothing, so finds nothing yet")
		wants(t, cons.Run(ctxT(t)), "consumer")

		notThere(t, c, acemq.PartitionQueue(q, 0))
		notThere(t, c, acemq.ParkingQueue(q))
		info, err := c.Transport().Inspect(ctxT(t), q)
		require.NoError(t, err, "the plain queue is left as it was")
		require.Zero(t, info.Consumers)
	})
}

// A plain consumer (or router, or batch consumer) on an ordered queue's
// name fails, saying what exists, and declares no queue beside it.
func TestPlainOnAnOrderedQueueFails(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := orderedQueue(t, url, 2)
		// Should a plain consumer slip through, what it declared goes too.
		stray := []string{q}
		for _, d := range acemq.DefaultRetryPolicy().Delays {
			stray = append(stray, acemq.RetryQueue(q, d))
		}
		acemqtest.DeleteQueuesAfter(t, url, stray...)
		_, err := acemq.NewConsumer(c, q, ignoreStep, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}))
		require.NoError(t, err)
		wants := func(t *testing.T, err error, who string) {
			t.Helper()
			require.Error(t, err)
			for _, want := range []string{
				`acemq: ` + who + ` of "` + q + `": the broker has "` + q + `" as an ordered queue`,
				`an exchange "` + q + `"`, acemq.PartitionQueue(q, 0), "Consume it with Ordered",
				`docs/ordering.md, "Migrating a plain queue to ordered"`,
			} {
				require.ErrorContains(t, err, want)
			}
		}

		_, err = acemq.NewConsumer(c, q, ignoreStep)
		wants(t, err, "consumer")
		_, err = acemq.NewBatchConsumer(c, q, func(context.Context, []*acemq.Message[Step]) []acemq.Ack { return nil })
		wants(t, err, "batch consumer")
		r := acemq.NewRouter(c, q)
		acemq.Route(r, ignoreStep)
		wants(t, r.Run(ctxT(t)), "router")
		cons, err := acemq.NewConsumer(c, q, ignoreStep, acemq.NoDeclare())
		require.NoError(t, err)
		wants(t, cons.Run(ctxT(t)), "consumer")

		notThere(t, c, q)
	})
}

// No false positive: a plain consumer started again on its own plain
// queue, and an ordered one on its own ordered queue, each with and
// without NoDeclare, start and handle; so does a plain consumer of an
// ordered queue's .parked.
func TestOneKindRestartsOnItsOwnQueue(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		got := make(chan Step, 16)
		handle := func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			got <- m.Payload
			return acemq.Done()
		}
		handled := func(t *testing.T, want Step) {
			t.Helper()
			select {
			case s := <-got:
				require.Equal(t, want, s)
			case <-time.After(30 * time.Second):
				t.Fatalf("%+v was not handled", want)
			}
		}
		startRun := func(t *testing.T, cons *acemq.Consumer[Step]) context.CancelFunc {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- cons.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				select {
				case err := <-done:
					require.NoError(t, err)
				case <-time.After(10 * time.Second):
					t.Error("Run did not return within 10s of its ctx ending")
				}
			})
			return cancel
		}

		plain := consumerQueue(t, url, acemq.RetryPolicy{})
		pub := acemq.NewPublisher[Step](c, "", plain)
		for i, opts := range [][]acemq.ConsumerOption{nil, nil, {acemq.NoDeclare()}} {
			cons, err := acemq.NewConsumer(c, plain, handle, opts...)
			require.NoError(t, err, "plain consumer %d", i)
			stop := startRun(t, cons)
			require.NoError(t, pub.Send(ctxT(t), Step{N: i}))
			handled(t, Step{N: i})
			stop()
		}

		q := orderedQueue(t, url, 2)
		opub := acemq.NewPublisher[Step](c, q, "", acemq.KeyBy(func(s Step) string { return s.Key }))
		for i, opts := range [][]acemq.ConsumerOption{nil, nil, {acemq.NoDeclare()}} {
			cons, err := acemq.NewConsumer(c, q, handle, append(opts, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}))...)
			require.NoError(t, err, "ordered consumer %d", i)
			stop := startRun(t, cons)
			require.NoError(t, opub.Send(ctxT(t), Step{Key: "k", N: i}))
			handled(t, Step{Key: "k", N: i})
			stop()
		}

		parked, err := acemq.NewConsumer(c, acemq.ParkingQueue(q), handle)
		require.NoError(t, err, "a plain consumer of an ordered queue's .parked")
		deleteTopologyAfter(t, c, parked.Topology())
		startRun(t, parked)
		require.NoError(t, acemq.NewPublisher[Step](c, "", acemq.ParkingQueue(q)).Send(ctxT(t), Step{N: 7}))
		handled(t, Step{N: 7})
	})
}

// The migration docs/ordering.md describes: with the plain queue's
// consumers stopped, an ordered consumer started on a new name takes what
// Replay (acemq replay OLD NEW) drains from the old queue into its
// exchange, each key in the order it was sent; a message sent without a
// key is parked; the old queue is left empty, to delete.
func TestMigratePlainQueueToOrdered(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		old := consumerQueue(t, url, acemq.RetryPolicy{})
		plain, err := acemq.NewConsumer(c, old, ignoreStep) // declared, then stopped: never run
		require.NoError(t, err)
		deleteTopologyAfter(t, c, plain.Topology())
		pub := acemq.NewPublisher[Step](c, "", old, acemq.KeyBy(func(s Step) string { return s.Key }))
		const per = 20
		for n := 1; n <= per; n++ {
			for _, k := range []string{"a", "b", "c"} {
				require.NoError(t, pub.Send(ctxT(t), Step{Key: k, N: n}))
			}
		}
		require.NoError(t, acemq.NewPublisher[Step](c, "", old).Send(ctxT(t), Step{N: 99}))

		q := orderedQueue(t, url, 4)
		log := newOrderLog()
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			end := log.start(m.Payload)
			time.Sleep(2 * time.Millisecond)
			end(true)
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{Partitions: 4}), acemq.Concurrency(4))
		require.NoError(t, err)
		run(t, cons)

		rep, err := patterns.Replay(ctxT(t), c, old, q)
		require.NoError(t, err)
		require.Equal(t, patterns.ReplayReport{Moved: 3*per + 1}, rep)
		within(t, 30*time.Second, "every keyed message handled", func() bool { return log.handled() == 3*per })
		log.check(t, []string{"a", "b", "c"}, per)
		env, err := acemq.EnvelopeOf(take(t, c, acemq.ParkingQueue(q)).Message)
		require.NoError(t, err)
		require.Contains(t, env.Error, "has no key")
		empty(t, c, old)
	})
}

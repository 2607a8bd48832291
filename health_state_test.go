package acemq_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
)

// consumerHealth returns the one ConsumerHealth of queue in c's report.
func consumerHealth(t *testing.T, c *acemq.Conn, queue string) acemq.ConsumerHealth {
	t.Helper()
	found := inReport(c.HealthReport(ctxT(t)), queue)
	require.Len(t, found, 1, "consumers of %q in the report", queue)
	return found[0]
}

// inReport is every consumer of queue in r.
func inReport(r acemq.HealthReport, queue string) []acemq.ConsumerHealth {
	var found []acemq.ConsumerHealth
	for _, h := range r.Consumers {
		if h.Queue == queue {
			found = append(found, h)
		}
	}
	return found
}

// stateIs waits until queue's consumer is in state, and returns it then.
func stateIs(t *testing.T, c *acemq.Conn, queue string, state acemq.ConsumerState) acemq.ConsumerHealth {
	t.Helper()
	var h acemq.ConsumerHealth
	eventually(t, fmt.Sprintf("the consumer of %q to be %s", queue, state), func() bool {
		h = consumerHealth(t, c, queue)
		return h.State == state
	})
	return h
}

func nop[T any](context.Context, *acemq.Message[T]) acemq.Ack { return acemq.Done() }

// TestRouterRoutedTwiceIsFaulted (issue 32 item 1): a type routed twice is
// found when Route is called, not first at Run. It is logged once at
// Error, and from then on the Router is faulted in HealthReport, before
// any Run, and Health fails with ErrFaulted (not ErrUnavailable: the
// broker is fine); Run returns the same error.
func TestRouterRoutedTwiceIsFaulted(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		logs := &levelLog{}
		c := connectURL(t, url, acemq.WithLogger(slog.New(logs)), acemq.WithRetryPolicy(fastRetry))
		q := consumerQueue(t, url, fastRetry)
		r := acemq.NewRouter(c, q)
		acemq.Route(r, nop[Deposited])
		h := consumerHealth(t, c, q)
		assert.Equal(t, acemq.StateStarting, h.State)
		assert.Equal(t, "router", h.Kind)
		// Not run yet: nothing consumes (issue 37 item 6), but nothing is
		// faulted either.
		notRun := c.Health(ctxT(t))
		require.ErrorIs(t, notRun, acemq.ErrNotRunning, "one route, not run yet")
		assert.NotErrorIs(t, notRun, acemq.ErrFaulted, "one route, not run yet")

		before := time.Now().Add(-time.Second) // Since is stamped to the second in texts, not in the field
		acemq.Route(r, nop[OrderPlaced], acemq.TypeName("Deposited"))
		h = consumerHealth(t, c, q)
		assert.Equal(t, acemq.StateFaulted, h.State)
		require.ErrorIs(t, h.Err, acemq.ErrFaulted)
		assert.Contains(t, h.Err.Error(), fmt.Sprintf(`router of %q: type "Deposited" is routed twice`, q))
		assert.True(t, h.Since.After(before) && !h.Since.After(time.Now()), "Since %v", h.Since)
		health := c.Health(ctxT(t))
		require.ErrorIs(t, health, acemq.ErrFaulted)
		assert.NotErrorIs(t, health, acemq.ErrUnavailable)
		var errorLines []string
		for _, l := range logs.atLeast(slog.LevelError) {
			if strings.Contains(l, "routed twice") {
				errorLines = append(errorLines, l)
			}
		}
		assert.Len(t, errorLines, 1, "Error lines about the route")

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := r.Run(ctx)
		require.Error(t, err)
		assert.Contains(t, err.Error(), `type "Deposited" is routed twice`)
		h2 := consumerHealth(t, c, q)
		assert.Equal(t, acemq.StateFaulted, h2.State, "after Run")
		assert.Equal(t, h.Since, h2.Since, "faulted since the Route, not since the Run")
	})
}

// TestRouterInvalidOptionIsFaulted: NewRouter returns no error, so a
// Router given an invalid option is in the report, faulted, from the
// start.
func TestRouterInvalidOptionIsFaulted(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := acemqtestQueue(t)
	r := acemq.NewRouter(c, q, acemq.Concurrency(0))
	acemq.Route(r, nop[Deposited])
	h := consumerHealth(t, c, q)
	assert.Equal(t, acemq.StateFaulted, h.State)
	require.ErrorIs(t, h.Err, acemq.ErrFaulted)
	assert.Contains(t, h.Err.Error(), "Concurrency(0)")
	require.ErrorIs(t, c.Health(ctxT(t)), acemq.ErrFaulted)
	err := r.Run(ctxT(t))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Concurrency(0)")
}

// TestRunErrorFaults (issue 32 item 1): a consumer whose Run returned an
// error stays in HealthReport, faulted, with that error and since when,
// and Health fails with ErrFaulted; Nonessential keeps it out of Health
// but not out of the report; the next Run that consumes clears the fault.
func TestRunErrorFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		nonessential bool
	}{{"essential", false}, {"Nonessential", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			onBrokers(t, func(t *testing.T, url string) {
				c := connectURL(t, url, acemq.WithRetryPolicy(fastRetry))
				q := consumerQueue(t, url, fastRetry)
				opts := []acemq.ConsumerOption{acemq.NoDeclare()}
				if tc.nonessential {
					opts = append(opts, acemq.Nonessential())
				}
				cons, err := acemq.NewConsumer(c, q, nop[OrderPlaced], opts...)
				require.NoError(t, err)
				if tc.nonessential {
					require.NoError(t, c.Health(ctxT(t)), "made, not run, Nonessential")
				} else {
					require.ErrorIs(t, c.Health(ctxT(t)), acemq.ErrNotRunning, "made, not run")
				}

				before := time.Now()
				runErr := cons.Run(ctxT(t)) // NoDeclare: the queues do not exist
				after := time.Now()
				require.ErrorContains(t, runErr, "do not exist")

				h := consumerHealth(t, c, q)
				assert.Equal(t, acemq.StateFaulted, h.State)
				assert.Equal(t, tc.nonessential, h.Nonessential)
				require.ErrorIs(t, h.Err, acemq.ErrFaulted)
				require.ErrorIs(t, h.Err, runErr, "the report's Err wraps what Run returned")
				assert.Contains(t, h.Err.Error(), runErr.Error())
				assert.False(t, h.Since.Before(before) || h.Since.After(after), "Since %v, Run from %v to %v", h.Since, before, after)
				health := c.Health(ctxT(t))
				if tc.nonessential {
					require.NoError(t, health, "a Nonessential consumer's fault")
				} else {
					require.ErrorIs(t, health, acemq.ErrFaulted)
					assert.Contains(t, health.Error(), runErr.Error())
				}

				// Fixed (a consumer elsewhere declares the queues): the next
				// Run consumes, and the fault is gone.
				_, err = acemq.NewConsumer(connectURL(t, url, acemq.WithRetryPolicy(fastRetry)), q, nop[OrderPlaced])
				require.NoError(t, err)
				run(t, cons)
				stateIs(t, c, q, acemq.StateConsuming)
			})
		})
	}
}

// TestStartingConsumingStopped: a consumer is in the report from
// NewConsumer on, starting; consuming while Run runs; stopped once Run
// returned nil, and it stays there. Before Run and after it, nothing
// consumes: Err and Health wrap ErrNotRunning (issue 37 item 6).
func TestStartingConsumingStopped(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url, acemq.WithRetryPolicy(fastRetry))
		q := consumerQueue(t, url, fastRetry)
		made := time.Now()
		cons, err := acemq.NewConsumer(c, q, nop[OrderPlaced])
		require.NoError(t, err)
		h := consumerHealth(t, c, q)
		assert.Equal(t, acemq.StateStarting, h.State)
		assert.False(t, h.Since.Before(made), "starting since %v, made at %v", h.Since, made)
		require.ErrorIs(t, h.Err, acemq.ErrNotRunning)
		assert.Contains(t, h.Err.Error(), fmt.Sprintf("consumer of %q is not running: made at ", q))
		assert.Nil(t, h.Partitions, "not Ordered")

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		started := time.Now()
		done := make(chan error, 1)
		go func() { done <- cons.Run(ctx) }()
		h = stateIs(t, c, q, acemq.StateConsuming)
		assert.False(t, h.Since.Before(started), "consuming since %v, Run at %v", h.Since, started)
		assert.NoError(t, h.Err)
		require.NoError(t, c.Health(ctxT(t)))

		stopped := time.Now()
		cancel()
		require.NoError(t, <-done)
		h = consumerHealth(t, c, q)
		assert.Equal(t, acemq.StateStopped, h.State)
		assert.False(t, h.Since.Before(stopped), "stopped since %v, cancelled at %v", h.Since, stopped)
		require.ErrorIs(t, h.Err, acemq.ErrNotRunning)
		assert.Contains(t, h.Err.Error(), fmt.Sprintf("consumer of %q is not running: its Run returned at ", q))
		require.ErrorIs(t, c.Health(ctxT(t)), acemq.ErrNotRunning, "a stopped consumer: nothing consumes")
	})
}

// TestOrderedReportHasPartitions (issue 29 item 6): an ordered consumer's
// report holds the partitions it holds, as Partitions returns them.
func TestOrderedReportHasPartitions(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := orderedQueue(t, url, 4)
		cons, err := acemq.NewConsumer(c, q, nop[Step], acemq.Ordered(acemq.OrderPolicy{Partitions: 4}))
		require.NoError(t, err)
		run(t, cons)
		eventually(t, "the one instance to hold all 4 partitions", func() bool { return len(cons.Partitions()) == 4 })
		h := stateIs(t, c, q, acemq.StateConsuming)
		assert.Equal(t, []int{0, 1, 2, 3}, h.Partitions)
		assert.Equal(t, cons.Partitions(), h.Partitions)
	})
}

// outageTransport is a memory transport whose broker can be taken away:
// while it is, Health reports the connection down and every subscription
// not consuming, as transport/rabbitmq does through an outage (the
// in-process broker itself never goes away).
type outageTransport struct {
	*memory.Transport
	mu   sync.Mutex
	down time.Time // zero while up
}

func (o *outageTransport) setDown(down bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = time.Time{}
	if down {
		o.down = time.Now()
	}
}

func (o *outageTransport) since() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.down
}

func (o *outageTransport) Health(ctx context.Context) error {
	if err := o.Transport.Health(ctx); err != nil {
		return err
	}
	if since := o.since(); !since.IsZero() {
		return fmt.Errorf("outage: connection down since %s", since.UTC().Format(time.RFC3339))
	}
	return nil
}

func (o *outageTransport) Subscription(queue string) (transport.Subscription, bool) {
	s, ok := o.Transport.Subscription(queue)
	if since := o.since(); ok && !since.IsZero() {
		s = transport.Subscription{Since: since, Err: fmt.Errorf("outage: consumer on %q not consuming: the connection is down", queue)}
	}
	return s, ok
}

// TestOutageIsWaiting (issue 32 item 1): while the broker is away, a
// running consumer is waiting, not consuming: its Err wraps
// ErrUnavailable, its Since is when its subscription went, and
// HealthReport.Connection says the same; Health's error says it once.
// So is an ordered consumer. When the broker is back they are consuming
// again. On memory the outage is
// the transport's report; on RabbitMQ a proxy cuts the connection and
// refuses new ones.
func TestOutageIsWaiting(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, c *acemq.Conn, q, ordQ string, cut, restore func(), rabbit bool) {
		cons, err := acemq.NewConsumer(c, q, nop[OrderPlaced], acemq.Nonessential())
		require.NoError(t, err)
		essential, err := acemq.NewConsumer(c, q+".2", nop[OrderPlaced])
		require.NoError(t, err)
		ordered, err := acemq.NewConsumer(c, ordQ, nop[Step], acemq.Ordered(acemq.OrderPolicy{Partitions: 2}))
		require.NoError(t, err)
		run(t, cons)
		run(t, essential)
		run(t, ordered)
		stateIs(t, c, q, acemq.StateConsuming)
		stateIs(t, c, q+".2", acemq.StateConsuming)
		eventually(t, "the ordered consumer to hold its partitions", func() bool { return len(ordered.Partitions()) == 2 })
		stateIs(t, c, ordQ, acemq.StateConsuming)
		// A partition just taken may still be subscribing: the transport's
		// Health says so (starting) for a moment.
		eventually(t, "Health to be nil", func() bool { return c.Health(ctxT(t)) == nil })

		cutAt := time.Now().Add(-time.Second)
		cut()
		h := stateIs(t, c, q, acemq.StateWaiting)
		require.ErrorIs(t, h.Err, acemq.ErrUnavailable)
		assert.True(t, h.Since.After(cutAt), "waiting since %v, cut at %v", h.Since, cutAt)
		h2 := stateIs(t, c, q+".2", acemq.StateWaiting)
		require.ErrorIs(t, h2.Err, acemq.ErrUnavailable)
		ho := stateIs(t, c, ordQ, acemq.StateWaiting)
		require.ErrorIs(t, ho.Err, acemq.ErrUnavailable)
		t.Logf("the ordered consumer's Err: %v (partitions %v)", ho.Err, ho.Partitions)
		report := c.HealthReport(ctxT(t))
		require.ErrorIs(t, report.Connection, acemq.ErrUnavailable)
		health := c.Health(ctxT(t))
		require.ErrorIs(t, health, acemq.ErrUnavailable)
		assert.NotErrorIs(t, health, acemq.ErrFaulted)
		t.Logf("Health during the outage: %v", health)
		t.Logf("the consumer's Err: %v", h.Err)
		if rabbit {
			// One truth: in one report, the transport's Health line for
			// each waiting consumer is that consumer's Err, and the
			// report's Err says it once. Read again until one report
			// shows it: the line's reason changes as the transport learns
			// more (the connection's EOF, then the consumer's cancel).
			assert.EventuallyWithT(t, func(ct *assert.CollectT) {
				r := c.HealthReport(ctxT(t))
				if !assert.Error(ct, r.Connection, "the connection's health") {
					return
				}
				all := r.Err().Error()
				for _, name := range []string{q, q + ".2"} {
					found := inReport(r, name)
					if !assert.Len(ct, found, 1, "consumers of %q", name) || !assert.Error(ct, found[0].Err, "%q's Err", name) {
						continue
					}
					line := found[0].Err.Error()
					assert.Contains(ct, r.Connection.Error(), line, "the transport's line for %q", name)
					assert.Equal(ct, 1, strings.Count(all, line), "the report's Err says %q's once:\n%s", name, all)
				}
			}, 20*time.Second, 5*time.Millisecond)
		} else {
			assert.NotContains(t, health.Error(), h2.Err.Error(), "Connection says it; the consumer's Err is left out")
		}

		restore()
		stateIs(t, c, q, acemq.StateConsuming)
		stateIs(t, c, q+".2", acemq.StateConsuming)
		eventually(t, "the ordered consumer to hold its partitions again", func() bool { return len(ordered.Partitions()) == 2 })
		stateIs(t, c, ordQ, acemq.StateConsuming)
		eventually(t, "Health to be nil again", func() bool { return c.Health(ctxT(t)) == nil })
	}
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		tr := &outageTransport{Transport: memory.NewBroker().Connect()}
		c := connectURL(t, "memory://", acemq.WithTransport(tr))
		q := acemqtestQueue(t)
		check(t, c, q, q+".ordered", func() { tr.setDown(true) }, func() { tr.setDown(false) }, false)
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		url := acemqtest.RabbitMQ(t)
		p := newSpreadProxy(t, url)
		c := connectURL(t, p.url, acemq.WithRetryPolicy(fastRetry))
		q := consumerQueue(t, url, fastRetry)
		consumerQueue2 := q + ".2"
		acemqtest.DeleteQueuesAfter(t, url, consumerQueue2, acemq.RetryQueue(consumerQueue2, fastRetry.Delays[0]), acemq.RetryQueue(consumerQueue2, fastRetry.Delays[1]))
		check(t, c, q, orderedQueue(t, url, 2), func() { p.freeze(); p.cut() }, p.thaw, true)
	})
}

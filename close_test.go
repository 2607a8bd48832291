package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

// TestCloseLeavesNothingRunning (issue 41 item 2): Close of a running
// consumer of every kind, one with a handler holding a delivery, leaves no
// goroutine of it behind while its Conn stays open.
func TestCloseLeavesNothingRunning(t *testing.T) {
	// Not parallel: it counts every goroutine of the process.
	url := acemqtest.Memory(t)
	c := connectURL(t, url)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, k := range kinds {
		m := makeKind(t, url, c, k, acemq.Concurrency(4))
		done := make(chan error, 1)
		go func() { done <- m.c.Run(context.Background()) }()
		healthy(t, c)
		for i := range 10 {
			m.send(t, c, fmt.Sprint(i))
		}
		m.send(t, c, "hold")
		m.waitStarted(t, "hold")
		time.AfterFunc(50*time.Millisecond, func() { close(m.release) })
		require.NoError(t, m.c.Close(), k.name)
		select {
		case err := <-done:
			require.NoError(t, err, "%s: the Run Close stopped", k.name)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Run did not return after Close", k.name)
		}
	}
	require.NoError(t, c.Health(ctxT(t)), "every consumer closed")
}

// TestCloseRacesRun: Close and Run called at the same time, from many
// goroutines, end with the consumer closed: every Run returns nil (it ran
// and Close stopped it) or ErrConsumerClosed (it came after), and none is
// left running.
func TestCloseRacesRun(t *testing.T) {
	t.Parallel()
	c := connect(t)
	for i := range 20 {
		cons, err := acemq.NewConsumer(c, fmt.Sprintf("%s-%d", acemqtestQueue(t), i), nop[OrderPlaced])
		require.NoError(t, err)
		var wg sync.WaitGroup
		runs := make(chan error, 4)
		for range 4 {
			wg.Go(func() { runs <- cons.Run(ctxT(t)) })
		}
		wg.Go(func() { assert.NoError(t, cons.Close()) })
		wg.Go(func() { assert.NoError(t, cons.Close()) })
		wg.Wait()
		close(runs)
		for err := range runs {
			if err != nil && !errors.Is(err, acemq.ErrConsumerClosed) {
				// A Run that met another one running says so; it is not
				// left running either.
				assert.ErrorContains(t, err, "is already running")
			}
		}
		require.ErrorIs(t, cons.Run(ctxT(t)), acemq.ErrConsumerClosed)
	}
	require.NoError(t, c.Health(ctxT(t)))
	assert.Empty(t, c.HealthReport(ctxT(t)).Consumers)
}

// TestCloseBeforeRun: a consumer closed before any Run leaves the report
// and never runs; closing the Conn afterwards is as usual.
func TestCloseBeforeRun(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := acemqtestQueue(t)
	cons, err := acemq.NewBatchConsumer(c, q, func(context.Context, []*acemq.Message[OrderPlaced]) []acemq.Ack { return nil })
	require.NoError(t, err)
	require.ErrorIs(t, c.Health(ctxT(t)), acemq.ErrNotRunning)
	require.NoError(t, cons.Close())
	require.NoError(t, c.Health(ctxT(t)))
	err = cons.Run(ctxT(t))
	require.ErrorIs(t, err, acemq.ErrConsumerClosed)
	assert.EqualError(t, err, fmt.Sprintf("acemq: batch consumer of %q was closed with Close; a closed consumer does not run again (make a new one)", q))
	require.NoError(t, c.Close())
	require.NoError(t, cons.Close(), "after the Conn's Close")
}

package acemq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRunStopsGracefully(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	c := connect(t, opt)
	q := acemqtestQueue(t)
	started := make(chan struct{}, 16)
	release := make(chan struct{})
	var handled atomic.Int32
	cons, err := acemq.NewConsumer(c, q, func(ctx context.Context, _ *acemq.Message[OrderPlaced]) acemq.Ack {
		started <- struct{}{}
		<-release
		if ctx.Err() != nil {
			return acemq.Retry(ctx.Err())
		}
		handled.Add(1)
		return acemq.Done()
	}, acemq.Concurrency(2), acemq.Prefetch(10))
	require.NoError(t, err)
	pub := acemq.NewPublisher[OrderPlaced](c, "", q)
	for range 10 {
		require.NoError(t, pub.Send(ctxT(t), OrderPlaced{}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	<-started
	<-started
	cancel() // two in flight, eight prefetched
	select {
	case err := <-done:
		t.Fatalf("Run returned %v before its in-flight deliveries settled", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	assert.EqualValues(t, 2, handled.Load(), "in-flight handlers finish with a live ctx")
	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	got.none(t)
	info, err := c.Transport().Inspect(ctxT(t), q)
	require.NoError(t, err)
	assert.Equal(t, 8, info.Messages, "prefetched-but-unstarted deliveries went back to the queue")
}

func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	c := connect(t, opt)
	q := acemqtestQueue(t)
	started := make(chan struct{})
	release := make(chan struct{})
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		close(started)
		<-release
		return acemq.Retry(errors.New("once more"))
	})
	require.NoError(t, err)
	runErr := make(chan error, 1)
	go func() { runErr <- cons.Run(context.Background()) }()
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	<-started
	shut := make(chan error, 1)
	go func() { shut <- c.Shutdown(ctxT(t)) }()
	time.Sleep(20 * time.Millisecond)
	close(release)
	require.NoError(t, <-shut)
	assert.ErrorIs(t, <-runErr, acemq.ErrClosed)
	s := got.next(t)
	assert.Equal(t, acemq.OutcomeRetried, s.Outcome, "the in-flight delivery settled, its move confirmed, during Shutdown")
	assert.ErrorIs(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(context.Background(), OrderPlaced{}), acemq.ErrClosed)
}

func TestShutdownGivesUpWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := acemqtestQueue(t)
	started := make(chan struct{})
	cons, err := acemq.NewConsumer(c, q, func(ctx context.Context, _ *acemq.Message[OrderPlaced]) acemq.Ack {
		close(started)
		<-ctx.Done() // only Close ends it
		return acemq.Retry(ctx.Err())
	})
	require.NoError(t, err)
	runErr := make(chan error, 1)
	go func() { runErr <- cons.Run(context.Background()) }()
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, c.Shutdown(ctx), context.DeadlineExceeded)
	assert.ErrorIs(t, <-runErr, acemq.ErrClosed)
}

func TestCloseIsIdempotentAndEverythingAfterFails(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := declareQueue(t, c)
	pub := acemq.NewPublisher[OrderPlaced](c, "", q)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	assert.ErrorIs(t, pub.Send(context.Background(), OrderPlaced{}), acemq.ErrClosed)
	assert.ErrorIs(t, c.PublishRaw(context.Background(), acemq.RawMessage{RoutingKey: q, Envelope: &acemq.Envelope{ID: "x"}}), acemq.ErrClosed)
	assert.ErrorIs(t, c.Declare(context.Background(), acemq.Queue{Name: q}), acemq.ErrClosed)
	assert.ErrorIs(t, c.Health(context.Background()), acemq.ErrClosed)
	_, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
	assert.ErrorIs(t, err, acemq.ErrClosed)
	_, err = pub.Prepare(context.Background(), OrderPlaced{})
	assert.ErrorIs(t, err, acemq.ErrClosed)
}

func TestNoGoroutineOutlivesClose(t *testing.T) {
	// Not parallel: it counts every goroutine of the process.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	c, err := acemq.Connect(ctx, "memory://", acemq.WithLogger(quiet))
	require.NoError(t, err)
	q := "leak-check"
	got := make(chan struct{}, 100)
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		got <- struct{}{}
		return acemq.Retry(errors.New("again"))
	}, acemq.Concurrency(8), acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 2, Delays: []time.Duration{time.Millisecond}}))
	require.NoError(t, err)
	go func() { _ = cons.Run(ctx) }()
	results := acemq.NewPublisher[OrderPlaced](c, "", q).SendAll(ctx, make([]OrderPlaced, 50))
	for _, r := range results {
		require.NoError(t, r.Err)
	}
	<-got
	require.NoError(t, c.Close())
}

func TestHealth(t *testing.T) {
	t.Parallel()
	c := connect(t)
	require.NoError(t, c.Health(ctxT(t)))
}

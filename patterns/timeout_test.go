package patterns_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithTimeout(t *testing.T) {
	t.Parallel()
	const d = 20 * time.Millisecond
	errBusy := errors.New("the warehouse is busy")
	// wait blocks until the handler's ctx ends, then answers with ack(err).
	wait := func(ack func(error) acemq.Ack) acemq.Handler[OrderPlaced] {
		return func(ctx context.Context, _ *acemq.Message[OrderPlaced]) acemq.Ack {
			<-ctx.Done()
			return ack(ctx.Err())
		}
	}
	for _, tc := range []struct {
		name      string
		h         acemq.Handler[OrderPlaced]
		outer     time.Duration // a shorter deadline from further out, when not zero
		wantKind  string
		wantErr   string
		wantDelay time.Duration
		wantFatal bool
	}{
		{name: "Retry stays Retry", h: wait(acemq.Retry), wantKind: "retry", wantErr: "timed out after 20ms"},
		{name: "RetryAfter keeps its delay", h: wait(func(err error) acemq.Ack { return acemq.RetryAfter(time.Minute, err) }),
			wantKind: "retry", wantErr: "timed out after 20ms", wantDelay: time.Minute},
		{name: "Reject stays Reject", h: wait(acemq.Reject), wantKind: "reject", wantErr: "timed out after 20ms"},
		{name: "AckOf a wrapped deadline", h: wait(func(err error) acemq.Ack { return acemq.AckOf(fmt.Errorf("calling the bank: %w", err)) }),
			wantKind: "retry", wantErr: "timed out after 20ms"},
		{name: "Fatal stays Fatal", h: wait(func(err error) acemq.Ack { return acemq.AckOf(acemq.Fatal(err)) }),
			wantKind: "fatal", wantErr: "timed out after 20ms", wantFatal: true},
		{name: "Done is untouched", h: wait(func(error) acemq.Ack { return acemq.Done() }), wantKind: "done"},
		{name: "another error is untouched", h: wait(func(error) acemq.Ack { return acemq.Retry(errBusy) }),
			wantKind: "retry", wantErr: errBusy.Error()},
		{name: "a handler in time is untouched", h: func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
			return acemq.Retry(context.DeadlineExceeded)
		}, wantKind: "retry", wantErr: context.DeadlineExceeded.Error()},
		{name: "an outer deadline is not ours", h: wait(acemq.Retry), outer: time.Millisecond,
			wantKind: "retry", wantErr: context.DeadlineExceeded.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if tc.outer > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.outer)
				defer cancel()
			}
			h := patterns.Chain(tc.h, patterns.WithTimeout[OrderPlaced](d))
			ack := h(ctx, &acemq.Message[OrderPlaced]{Envelope: &acemq.Envelope{}})
			assert.Equal(t, tc.wantKind, ack.String())
			assert.Equal(t, tc.wantDelay, ack.Delay())
			if tc.wantErr == "" {
				assert.NoError(t, ack.Err())
				return
			}
			require.Error(t, ack.Err())
			assert.Equal(t, tc.wantErr, ack.Err().Error())
			if tc.wantErr != errBusy.Error() {
				assert.ErrorIs(t, ack.Err(), context.DeadlineExceeded, "the cause is still reachable")
			}
			assert.Equal(t, tc.wantFatal, errors.Is(ack.Err(), acemq.ErrFatal))
		})
	}
}

func TestWithTimeoutZeroIsUnbounded(t *testing.T) {
	t.Parallel()
	h := patterns.Chain(func(ctx context.Context, _ *acemq.Message[OrderPlaced]) acemq.Ack {
		if _, ok := ctx.Deadline(); ok {
			return acemq.Reject(errors.New("the handler got a deadline"))
		}
		return acemq.Done()
	}, patterns.WithTimeout[OrderPlaced](0))
	assert.Equal(t, "done", h(context.Background(), &acemq.Message[OrderPlaced]{Envelope: &acemq.Envelope{}}).String())
}

func TestWithTimeoutReasonOnTheLadder(t *testing.T) {
	t.Parallel()
	got, onSettled := newSettlements()
	c := connect(t, "memory://", onSettled,
		acemq.WithRetryPolicy(acemq.RetryPolicy{MaxAttempts: 2, Delays: []time.Duration{10 * time.Millisecond}}))
	q := queue(t, c, "slow", ".retry.10ms")
	h := patterns.Chain(func(ctx context.Context, _ *acemq.Message[OrderPlaced]) acemq.Ack {
		<-ctx.Done()
		return acemq.AckOf(ctx.Err())
	}, patterns.WithTimeout[OrderPlaced](10*time.Millisecond))
	cons, err := acemq.NewConsumer(c, q, h)
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "A-1"}))
	first, last := got.next(t), got.next(t)
	assert.Equal(t, acemq.OutcomeRetried, first.Outcome)
	assert.Equal(t, "timed out after 10ms", first.Reason)
	assert.Equal(t, acemq.OutcomeDeadLettered, last.Outcome)
	assert.Equal(t, "gave up after 2 attempts: timed out after 10ms", last.Reason)
}

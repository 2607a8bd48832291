package acemq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
	"github.com/stretchr/testify/require"
)

// refusingAcker fails the first ack, as a channel closed under it would.
type refusingAcker struct {
	transport.Acknowledger
	refused *atomic.Bool
}

func (a refusingAcker) Ack(tag uint64) error {
	if a.refused.CompareAndSwap(false, true) {
		_ = a.Acknowledger.Nack(tag, true) // the broker has it again, as after a channel loss
		return errors.New("channel closed")
	}
	return a.Acknowledger.Ack(tag)
}

// ackRefusing is a transport whose first ack fails.
type ackRefusing struct {
	transport.Transport
	refused atomic.Bool
}

func (t *ackRefusing) Consume(ctx context.Context, queue string, prefetch int, handle func(transport.Delivery)) error {
	return t.Transport.Consume(ctx, queue, prefetch, func(d transport.Delivery) {
		d.Acker = refusingAcker{Acknowledger: d.Acker, refused: &t.refused}
		handle(d)
	})
}

// TestAFailedAckIsNotASettlement: a handler's Done whose ack the client
// could not send settles nothing: the message's callbacks hear no outcome
// (so blob.DeleteOnDone keeps the object), OnSettled is not called, and the
// message comes again and is acked then.
func TestAFailedAckIsNotASettlement(t *testing.T) {
	t.Parallel()
	tr := &ackRefusing{Transport: memory.New(t.Name())}
	got, opt := newSettlements()
	c := connectURL(t, "memory://", acemq.WithTransport(tr), opt)
	q := declareQueue(t, c)
	heard := make(chan acemq.Outcome, 4)
	runs := make(chan struct{}, 4)
	cons, err := acemq.NewConsumer(c, q, func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		acemq.WhenSettled(ctx, func(_ context.Context, s acemq.Settlement) { heard <- s.Outcome })
		runs <- struct{}{}
		return acemq.Done()
	})
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "once"}))
	s := got.next(t)
	require.Equal(t, acemq.OutcomeAcked, s.Outcome)
	require.True(t, s.Redelivered, "the settled delivery is the second")
	require.Len(t, runs, 2, "the handler ran twice")
	require.Equal(t, acemq.Outcome(""), <-heard, "the first run's callbacks heard no outcome")
	require.Equal(t, acemq.OutcomeAcked, <-heard)
	select {
	case s := <-got:
		t.Fatalf("a second settlement: %+v", s)
	case <-time.After(100 * time.Millisecond):
	}
}

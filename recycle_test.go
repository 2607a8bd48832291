package acemq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
)

// TestNothingHandedToUserCodeIsRecycled (SPEC §13): a PublishContext, a
// ConsumeContext or a Message that a closure keeps still holds, after the
// engine is done with it and many more have passed, what it held when the
// closure saw it.
func TestNothingHandedToUserCodeIsRecycled(t *testing.T) {
	t.Parallel()
	const n = 50
	type kept struct {
		consume *acemq.ConsumeContext
		msg     *acemq.Message[OrderPlaced]
	}
	var (
		mu        sync.Mutex
		published []*acemq.PublishContext
		atSettle  = make(chan kept, 2*n)
	)
	got, hook := newSettlements()
	c := connect(t, hook,
		acemq.WithPublishInterceptor(func(_ context.Context, pc *acemq.PublishContext) error {
			mu.Lock()
			published = append(published, pc)
			mu.Unlock()
			return nil
		}),
		acemq.WithConsumeInterceptor(func(ctx context.Context, cc *acemq.ConsumeContext) error {
			acemq.WhenSettled(ctx, func(context.Context, acemq.Settlement) {
				atSettle <- kept{consume: cc}
			})
			return nil
		}))
	q := acemqtestQueue(t)
	cons, err := acemq.NewConsumer(c, q, func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		acemq.WhenSettled(ctx, func(context.Context, acemq.Settlement) { atSettle <- kept{msg: m} })
		return acemq.Done()
	})
	require.NoError(t, err)
	run(t, cons)

	pub := acemq.NewPublisher[OrderPlaced](c, "", q)
	for i := range n {
		require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: fmt.Sprint(i)}, acemq.MessageID(fmt.Sprintf("m-%d", i))))
	}
	for range n {
		got.next(t)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, published, n)
	for i, pc := range published {
		assert.Equal(t, q, pc.RoutingKey, "publish %d", i)
		assert.Equal(t, OrderPlaced{OrderID: fmt.Sprint(i)}, pc.Payload, "publish %d", i)
		require.NotNil(t, pc.Envelope, "publish %d", i)
		assert.Equal(t, fmt.Sprintf("m-%d", i), pc.Envelope.ID, "publish %d", i)
	}
	for range 2 * n {
		k := <-atSettle
		switch {
		case k.consume != nil:
			assert.Equal(t, q, k.consume.Queue, "a kept ConsumeContext lost its queue")
			require.NotNil(t, k.consume.Envelope, "a kept ConsumeContext lost its envelope")
			assert.Equal(t, "OrderPlaced", k.consume.Envelope.Type)
			assert.Equal(t, "application/json", k.consume.ContentType)
			assert.JSONEq(t, fmt.Sprintf(`{"orderId":%q,"totalCents":0}`, k.consume.Envelope.ID[2:]), string(k.consume.Body))
		default:
			assert.Equal(t, q, k.msg.Queue)
			require.NotNil(t, k.msg.Envelope)
			assert.Equal(t, "m-"+k.msg.Payload.OrderID, k.msg.Envelope.ID, "a kept Message changed")
		}
	}
}

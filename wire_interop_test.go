package acemq_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

// TestRawClientReadsTheEnvelope: a message acemq publishes is fully
// readable, from its AMQP properties alone, by a client that knows nothing
// of acemq (raw amqp091-go here), and a first-attempt, version-1 message
// without a causation carries no reserved header at all (wire format v2).
func TestRawClientReadsTheEnvelope(t *testing.T) {
	t.Parallel()
	url := acemqtest.RabbitMQ(t)
	q := acemqtestQueue(t)
	acemqtest.DeleteQueuesAfter(t, url, q)
	c, err := acemq.Connect(ctxT(t), url, acemq.WithOrigin("billing@host1"), acemq.WithLogger(quiet))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: q}))

	before := time.Now().Truncate(time.Second)
	pub := acemq.NewPublisher[OrderPlaced](c, "", q)
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "7"}, acemq.MessageID("order-7"), acemq.CorrelationID("conv-1")))
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q, acemq.SchemaVersion(2)).Send(ctxT(t), OrderPlaced{OrderID: "8"},
		acemq.MessageID("order-8"), acemq.CausationID("order-7"), acemq.Header("x-tenant", "alpha")))

	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	get := func() amqp.Delivery {
		t.Helper()
		for {
			d, ok, err := ch.Get(q, true)
			require.NoError(t, err)
			if ok {
				return d
			}
			select {
			case <-ctxT(t).Done():
				t.Fatal("no message arrived")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	first := get()
	assert.Equal(t, "order-7", first.MessageId)
	assert.Equal(t, "OrderPlaced", first.Type)
	assert.Equal(t, "conv-1", first.CorrelationId)
	assert.Equal(t, "billing@host1", first.AppId)
	assert.Equal(t, "application/json", first.ContentType)
	assert.Equal(t, amqp.Persistent, first.DeliveryMode)
	assert.False(t, first.Timestamp.Before(before), "timestamp %v is before the send at %v", first.Timestamp, before)
	assert.False(t, first.Timestamp.After(time.Now()), "timestamp %v is in the future", first.Timestamp)
	assert.Empty(t, first.Headers, "a first-attempt, version-1 message carries no header")
	assert.JSONEq(t, `{"orderId":"7","totalCents":0}`, string(first.Body))

	second := get()
	assert.Equal(t, "order-8", second.MessageId)
	assert.Equal(t, amqp.Table{"x-acemq-version": int32(2), "x-acemq-causation-id": "order-7", "x-tenant": "alpha"}, second.Headers,
		"reserved headers only for what no property holds")
}

package acemq_test

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// foreignProducer publishes with amqp091-go alone, the way a service in
// another language (a Python pika, a Node amqplib, a Java Spring producer)
// would: no acemq headers, properties as that ecosystem sets them.
func foreignProducer(t *testing.T, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	return ch
}

func publishForeign(t *testing.T, ch *amqp.Channel, queue string, p amqp.Publishing) {
	t.Helper()
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctxT(t), "", queue, true, false, p)
	require.NoError(t, err)
	ok, err := conf.WaitContext(ctxT(t))
	require.NoError(t, err)
	require.True(t, ok, "the broker confirmed it")
}

// TestForeignProducers checks that what producers outside acemq publish is
// handled as SPEC §3, §5 (codecs) and §6 (types) say.
func TestForeignProducers(t *testing.T) {
	t.Parallel()
	url := acemqtest.RabbitMQ(t)
	stamp := time.Date(2026, 3, 1, 12, 30, 15, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		p       amqp.Publishing
		outcome acemq.Outcome
		reason  string
		check   func(t *testing.T, m *acemq.Message[OrderPlaced])
	}{
		{name: "no content type: the Conn's codec decodes it",
			p:       amqp.Publishing{Body: []byte(`{"orderId":"py-1","totalCents":100}`)},
			outcome: acemq.OutcomeAcked,
			check: func(t *testing.T, m *acemq.Message[OrderPlaced]) {
				assert.Equal(t, OrderPlaced{OrderID: "py-1", TotalCents: 100}, m.Payload)
				assert.NotEmpty(t, m.Envelope.ID, "an ID is made up for a message without one")
				assert.Equal(t, 1, m.Envelope.Attempt)
				assert.Equal(t, "", m.Envelope.Type)
			}},
		{name: "a charset parameter",
			p:       amqp.Publishing{ContentType: "application/json; charset=utf-8", Body: []byte(`{"orderId":"node-1"}`)},
			outcome: acemq.OutcomeAcked,
			check: func(t *testing.T, m *acemq.Message[OrderPlaced]) {
				assert.Equal(t, "node-1", m.Payload.OrderID)
			}},
		{name: "AMQP properties and headers, no x-acemq- header",
			p: amqp.Publishing{
				ContentType: "application/json", MessageId: "java-42", CorrelationId: "conv-7",
				Type: "OrderPlaced", AppId: "billing-java", Timestamp: stamp, ReplyTo: "billing.replies",
				Headers: amqp.Table{"x-tenant": "acme", "priority-class": int32(2)},
				Body:    []byte(`{"orderId":"java-42","totalCents":990}`),
			},
			outcome: acemq.OutcomeAcked,
			check: func(t *testing.T, m *acemq.Message[OrderPlaced]) {
				e := m.Envelope
				assert.Equal(t, "java-42", e.ID)
				assert.Equal(t, "conv-7", e.CorrelationID)
				assert.Equal(t, "OrderPlaced", e.Type)
				assert.Equal(t, "billing-java", e.Origin)
				assert.True(t, stamp.Equal(e.FirstSeen), "FirstSeen %v from the timestamp property", e.FirstSeen)
				assert.Equal(t, "billing.replies", e.ReplyTo)
				assert.Equal(t, 1, e.Attempt)
				assert.Equal(t, 1, e.Version)
				assert.Equal(t, "acme", e.Headers["x-tenant"])
				assert.EqualValues(t, 2, e.Headers["priority-class"])
				assert.Equal(t, int64(990), m.Payload.TotalCents)
			}},
		{name: "a type property only, of the consumer's type",
			p:       amqp.Publishing{Type: "OrderPlaced", Body: []byte(`{"orderId":"t-1"}`)},
			outcome: acemq.OutcomeAcked,
			check: func(t *testing.T, m *acemq.Message[OrderPlaced]) {
				assert.Equal(t, "t-1", m.Payload.OrderID)
			}},
		{name: "a type property only, of another type",
			p:       amqp.Publishing{Type: "Refund", Body: []byte(`{"orderId":"t-2"}`)},
			outcome: acemq.OutcomeParked,
			reason:  `the message is of type "Refund"; this consumer takes "OrderPlaced"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, opt := newSettlements()
			c := connectURL(t, url, opt)
			q := consumerQueue(t, url, acemq.DefaultRetryPolicy())
			handled := make(chan *acemq.Message[OrderPlaced], 1)
			cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
				handled <- m
				return acemq.Done()
			})
			require.NoError(t, err)
			run(t, cons)
			publishForeign(t, foreignProducer(t, url), q, tc.p)
			s := got.next(t)
			assert.Equal(t, tc.outcome, s.Outcome)
			assert.Equal(t, tc.reason, s.Reason)
			if tc.check != nil {
				tc.check(t, <-handled)
			}
			if tc.outcome == acemq.OutcomeParked {
				p := take(t, c, acemq.ParkingQueue(q))
				assert.Equal(t, tc.p.Body, p.Body)
			}
		})
	}
}

// TestForeignProducerToARouter routes by the type property a foreign
// producer sets, and parks what it sends without one.
func TestForeignProducerToARouter(t *testing.T) {
	t.Parallel()
	url := acemqtest.RabbitMQ(t)
	got, opt := newSettlements()
	c := connectURL(t, url, opt)
	q := consumerQueue(t, url, acemq.DefaultRetryPolicy())
	r := acemq.NewRouter(c, q)
	refunds := make(chan Refund, 1)
	acemq.Route(r, func(_ context.Context, m *acemq.Message[Refund]) acemq.Ack {
		refunds <- m.Payload
		return acemq.Done()
	}, acemq.TypeName("refund.issued"))
	run(t, r)
	ch := foreignProducer(t, url)
	publishForeign(t, ch, q, amqp.Publishing{Type: "refund.issued", ContentType: "application/json; charset=UTF-8", Body: []byte(`{"orderId":"r-1","cents":5}`)})
	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	assert.Equal(t, Refund{OrderID: "r-1", Cents: 5}, <-refunds)
	publishForeign(t, ch, q, amqp.Publishing{Body: []byte(`{}`)})
	s := got.next(t)
	assert.Equal(t, acemq.OutcomeParked, s.Outcome)
	assert.Equal(t, `no handler for type "" on queue "`+q+`"`, s.Reason)
}

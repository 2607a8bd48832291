package rabbitmq_test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// rawChannel is an amqp091-go channel on url of its own, closed when t ends.
func rawChannel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("amqp091 Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("amqp091 Channel: %v", err)
	}
	return ch
}

// TestUntypedQueueDeclaredAgain: a classic queue declared without
// x-queue-type, as acemq declared its queues before it named their type,
// is declared again by the transport (which names it) without a conflict.
// (No transient one: RabbitMQ 4 deprecates them, and make test-rabbitmq4
// fails a run that used a deprecated feature.)
func TestUntypedQueueDeclaredAgain(t *testing.T) {
	url := brokerURL(t)
	tr := dial(t, url, rabbitmq.Config{})
	raw := rawChannel(t, url)
	durable := acemqtest.QueueName(t, "durable")
	acemqtest.DeleteQueuesAfter(t, url, durable)
	args := amqp.Table{"x-message-ttl": int32(1000)}
	if _, err := raw.QueueDeclare(durable, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if err := tr.Declare(ctxT(t), transport.Queue{Name: durable, Args: map[string]any{"x-message-ttl": 1000}}); err != nil {
		t.Fatalf("Declare of queues that exist untyped: %v", err)
	}
}

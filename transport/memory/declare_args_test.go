package memory_test

import (
	"context"
	"strings"
	"testing"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
)

// TestQueueArgumentsAsRabbitMQ: an argument value AMQP cannot carry is
// refused by the memory broker too, naming the argument.
func TestQueueArgumentsAsRabbitMQ(t *testing.T) {
	t.Parallel()
	tr := client(t, memory.NewBroker())
	err := tr.Declare(context.Background(), transport.Queue{Name: "q", Args: map[string]any{"x-message-ttl": uint64(5000)}})
	if err == nil || !strings.Contains(err.Error(), "argument x-message-ttl") {
		t.Fatalf("a uint64 argument: %v; want a refusal naming the argument", err)
	}
}

package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
	"github.com/acemq/acemq/transport/transporttest"
)

// TestConformance runs the shared transport suite against the real broker.
func TestConformance(t *testing.T) {
	url := brokerURL(t)
	transporttest.Run(t, func(t *testing.T) transport.Transport {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tr, err := rabbitmq.Dial(ctx, url, rabbitmq.Config{MinBackoff: 20 * time.Millisecond, MaxBackoff: time.Second})
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		return tr
	}, transporttest.Features{QuorumQueues: true, Timeout: 15 * time.Second, ErrorPrefix: "rabbitmq: "})
}

package memory_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
	"github.com/acemq/acemq/transport/transporttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	b := memory.NewBroker()
	transporttest.Run(t, func(*testing.T) transport.Transport { return b.Connect() },
		transporttest.Features{QuorumQueues: true, Timeout: 5 * time.Second, Quiet: 150 * time.Millisecond, ErrorPrefix: "memory: "})
}

func TestConformanceShared(t *testing.T) {
	name := "conformance-" + t.Name()
	transporttest.Run(t, func(*testing.T) transport.Transport { return memory.New(name) },
		transporttest.Features{QuorumQueues: true, Timeout: 5 * time.Second, Quiet: 150 * time.Millisecond, ErrorPrefix: "memory: "})
}

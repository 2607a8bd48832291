// Package clustertest proves acemq on a real three-node RabbitMQ cluster
// that the tests start themselves (internal/cluster), beside the machine's
// broker: nodes killed with SIGKILL, the node holding a quorum queue's
// leader stopped, a rolling restart, and a classic queue whose node dies,
// all under load. It has no code of its own; `make test-cluster` runs it
// on its own, since it needs most of the machine.
package clustertest

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/acemq/acemq/internal/cluster"
)

// The test cluster: its own node names and ports, distinct from the
// machine's broker (5672) and from `make cluster` (acemq-n, 5801).
var testCluster = cluster.Config{Name: "acemq-t", BasePort: 5811}

var (
	nodes    *cluster.Cluster
	startErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		startErr = fmt.Errorf("cluster tests skipped with -short")
		os.Exit(m.Run())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	testCluster.Logf = log.Printf
	nodes, startErr = cluster.Start(ctx, testCluster)
	cancel()
	code := m.Run()
	if nodes != nil {
		if err := nodes.Remove(); err != nil {
			log.Printf("removing the test cluster: %v", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needCluster returns the running cluster with every node up, or skips
// the test (fails it under ACEMQ_REQUIRE_BROKER=1) when none could start.
func needCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	if nodes == nil {
		if os.Getenv("ACEMQ_REQUIRE_BROKER") == "1" && !testing.Short() {
			t.Fatalf("no test cluster (ACEMQ_REQUIRE_BROKER=1): %v", startErr)
		}
		t.Skipf("no test cluster: %v", startErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, n := range nodes.Nodes {
		if err := n.Start(ctx); err != nil {
			t.Fatalf("restarting %s: %v", n.Name, err)
		}
	}
	return nodes
}

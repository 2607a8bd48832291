// Package clustertest proves acemq on a real three-node RabbitMQ cluster
// that the tests start themselves (tools/cluster), beside the machine's
// broker: nodes killed with SIGKILL, the node holding a quorum queue's
// leader stopped, a rolling restart, and a classic queue whose node dies,
// all under load. It has no code of its own. Its tests skip unless asked
// for: `make test-cluster` runs them on their own (it sets
// ACEMQ_CLUSTER_TESTS=1), since they need most of the machine.
package clustertest

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/acemq/acemq/tools/cluster"
	"github.com/acemq/acemq/tools/fencerun"
)

// The test cluster: its own node names and ports, distinct from the
// machine's broker (5672) and from `make cluster` (acemq-n, 5801).
var testCluster = cluster.Config{Name: "acemq-t", BasePort: 5811}

var (
	nodes    *cluster.Cluster
	startErr error
	// asked is whether the cluster tests were asked for (askVar is 1):
	// without it no node is started and every test skips.
	asked bool
)

// askVar is the environment variable `make test-cluster` sets.
const askVar = "ACEMQ_CLUSTER_TESTS"

func TestMain(m *testing.M) {
	fencerun.MaybeChild() // instance A of TestFencingOnTheCluster
	flag.Parse()
	if os.Getenv(askVar) != "1" {
		startErr = fmt.Errorf("the cluster tests start three RabbitMQ nodes of their own and need most of the machine: run them with `make test-cluster` (or %s=1)", askVar)
		os.Exit(m.Run())
	}
	if testing.Short() {
		startErr = fmt.Errorf("cluster tests skipped with -short")
		os.Exit(m.Run())
	}
	asked = true
	// scripts/rabbitmq4.sh points these at RabbitMQ 4.x nodes of their own
	// names and ports, run from a root file system (cluster.FromEnv).
	if testCluster, startErr = cluster.FromEnv(testCluster); startErr != nil {
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
		if asked && os.Getenv("ACEMQ_REQUIRE_BROKER") == "1" {
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

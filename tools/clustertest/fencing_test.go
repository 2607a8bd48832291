package clustertest

import (
	"testing"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/tools/fencerun"
)

// TestFencingOnTheCluster is the fencing experiment (tools/fencerun) on
// three nodes with quorum partition queues: instance A, connected to the
// first node, is frozen or cut off from it past the heartbeat timeout;
// instance B, on the URL list, takes its partitions. With fence-checked
// writes no key may end stale or unwritten; without, the figures are
// logged. The variables of `make fence-experiment` apply here too.
func TestFencingOnTheCluster(t *testing.T) {
	cl := needCluster(t)
	runs, hb, faults := fencerun.FromEnv(t)
	fencerun.Runs(t, runs, fencerun.Setup{Heartbeat: hb, AURL: cl.Nodes[0].URL(), BURL: cl.URLs(),
		Postgres: acemqtest.Postgres(t), Quorum: true}, faults)
}

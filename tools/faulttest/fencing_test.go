package faulttest

import (
	"testing"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/tools/fencerun"
)

// TestFencingOnOneBroker is the fencing experiment (tools/fencerun) on
// the machine's broker: an instance frozen, and one cut off by a proxy,
// past the heartbeat timeout while it handles an ordered queue's messages.
// With fence-checked writes no key may end stale or unwritten; without the
// check the figures are logged. The defaults are a short run of each;
// `make fence-experiment` runs the full one (5 runs, a 35 s freeze and a
// 60 s partition, the default 10 s heartbeat).
func TestFencingOnOneBroker(t *testing.T) {
	needCtl(t)
	runs, hb, faults := fencerun.FromEnv(t)
	url := acemqtest.RabbitMQ(t)
	fencerun.Runs(t, runs, fencerun.Setup{Heartbeat: hb, AURL: url, BURL: url, Postgres: acemqtest.Postgres(t)}, faults)
}

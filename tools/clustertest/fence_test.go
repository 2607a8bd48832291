package clustertest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq/tools/cluster"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// fenceCall is one Fence placed among all calls by a shared sequence.
type fenceCall struct {
	start, end int64
	value      uint64
	node       string
}

// TestFenceOnTheCluster: fencing counters on three nodes. Fences from
// connections on every node, concurrently, while the node that declared
// the counter (its stream's leader) is SIGKILLed and started again: every
// call that began after another returned gets a greater value, and once
// the node is back a connection on it goes on above all of them.
func TestFenceOnTheCluster(t *testing.T) {
	cl := needCluster(t)
	name := fmt.Sprintf("fence.cluster.%d", time.Now().UnixNano())
	dialNode := func(n *cluster.Node) *rabbitmq.Transport {
		tr, err := rabbitmq.Dial(ctxT(t, 30*time.Second), n.URL(), rabbitmq.Config{MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, Heartbeat: 2 * time.Second})
		if err != nil {
			t.Fatalf("Dial %s: %v", n.Name, err)
		}
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	trs := make([]*rabbitmq.Transport, len(cl.Nodes))
	for i, n := range cl.Nodes {
		trs[i] = dialNode(n)
	}
	t.Cleanup(func() {
		_ = trs[1].DeleteQueue(context.Background(), name)
	})
	var (
		seq   atomic.Int64
		mu    sync.Mutex
		calls []fenceCall
		fails = map[string]int{}
	)
	fence := func(i int, d time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		start := seq.Add(1)
		v, err := trs[i].Fence(ctx, name)
		end := seq.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			fails[cl.Nodes[i].Name]++
			return
		}
		calls = append(calls, fenceCall{start: start, end: end, value: v, node: cl.Nodes[i].Name})
	}
	for i := range trs { // the first declares the stream on node 0
		fence(i, 30*time.Second)
	}
	if len(calls) != len(trs) {
		t.Fatalf("a Fence on each node before the kill: %v failed", fails)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range trs {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				fence(i, 5*time.Second)
			}
		})
	}
	time.Sleep(2 * time.Second)
	killed := cl.Nodes[0]
	if err := killed.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := seq.Load()
	time.Sleep(10 * time.Second)
	if err := killed.Start(ctxT(t, 3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()

	// After the node is back: a new connection to it.
	trs[0] = dialNode(killed)
	var back uint64
	deadline := time.Now().Add(time.Minute)
	for back == 0 && time.Now().Before(deadline) {
		start := seq.Add(1)
		v, err := trs[0].Fence(ctxT(t, 10*time.Second), name)
		if err != nil {
			t.Logf("Fence on the restarted node: %v", err)
			continue
		}
		back = v
		calls = append(calls, fenceCall{start: start, end: seq.Add(1), value: v, node: killed.Name})
	}
	if back == 0 {
		t.Fatalf("no Fence on the restarted node %s within a minute", killed.Name)
	}

	perNode := map[string]int{}
	afterKill := map[string]int{}
	for _, c := range calls {
		perNode[c.node]++
		if c.start > killedAt {
			afterKill[c.node]++
		}
	}
	t.Logf("%d Fences (per node %v, begun after the kill %v), failed %v; last value %d", len(calls), perNode, afterKill, fails, back)
	if afterKill[cl.Nodes[1].Name]+afterKill[cl.Nodes[2].Name] == 0 {
		t.Errorf("no Fence succeeded on the surviving nodes after the kill")
	}

	byEnd := slices.SortedFunc(slices.Values(calls), func(a, b fenceCall) int { return cmp.Compare(a.end, b.end) })
	highest := make([]fenceCall, len(byEnd))
	for i, c := range byEnd {
		highest[i] = c
		if i > 0 && highest[i-1].value > c.value {
			highest[i] = highest[i-1]
		}
	}
	bad := 0
	for _, b := range calls {
		n, _ := slices.BinarySearchFunc(byEnd, b.start, func(c fenceCall, start int64) int { return cmp.Compare(c.end, start) })
		if n > 0 && b.value <= highest[n-1].value {
			if bad < 5 {
				t.Errorf("a Fence on %s that began after one on %s returned %d got %d", b.node, highest[n-1].node, highest[n-1].value, b.value)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d Fences not above every value returned before they began", bad)
	}
}

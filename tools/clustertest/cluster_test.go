package clustertest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/transport/rabbitmq"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// median of ds, which it sorts.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// TestKillConnectedNode SIGKILLs the node the Conn is connected to, three
// times, while 8 goroutines Send to a quorum queue and a consumer of the
// same Conn handles it; the killed node is started again after each run.
// Every confirmed message is handled, and Sends are confirmed again soon
// after each kill.
func TestKillConnectedNode(t *testing.T) {
	cl := needCluster(t)
	l := startLoad(t, cl, loadConfig{})
	var resumed []time.Duration
	for run := range 3 {
		n := l.node(cl)
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
		at := time.Now() // the process is gone
		d := l.waitResumed(at, time.Minute)
		resumed = append(resumed, d)
		deadline := time.Now().Add(time.Minute)
		for l.node(cl) == n {
			if time.Now().After(deadline) {
				t.Fatalf("Sends are confirmed, but the Conn is still on the killed node %s", n.Name)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("run %d: killed %s; Sends confirmed again after %v, now on %s", run+1, n.Name, d.Round(time.Millisecond), l.node(cl).Name)
		l.waitConfirms(200, time.Minute)
		if err := n.Start(ctxT(t, 3*time.Minute)); err != nil {
			t.Fatal(err)
		}
		l.waitConfirms(200, time.Minute)
	}
	r := l.finish()
	if slices.Max(resumed) > 2*time.Second {
		t.Logf("a slow failover; the Conn's log:\n%s", l.logs.String())
	}
	t.Logf("kill the connected node ×3: %v; Sends confirmed again after %v (median %v, max %v); failed Sends: %v",
		r, resumed, median(slices.Clone(resumed)).Round(time.Millisecond), slices.Max(resumed).Round(time.Millisecond), l.errorsSeen())
	if m := median(slices.Clone(resumed)); m > 5*time.Second {
		t.Errorf("Sends were confirmed again %v after a kill (median); the promise is within 5 s", m)
	}
	if got := strings.Count(l.logs.String(), "acemq: rabbitmq reconnected"); got < 3 {
		t.Errorf("%d reconnection log lines for 3 moves:\n%s", got, l.logs.String())
	}
}

// TestStopQueueLeader stops the node holding the quorum queue's leader
// while the Conn is connected elsewhere: the queue elects a new leader on
// the other two nodes and the load goes on without a reconnection.
func TestStopQueueLeader(t *testing.T) {
	cl := needCluster(t)
	home := cl.Nodes[0]
	l := startLoad(t, cl, loadConfig{home: home, avoid: home})
	leader, err := cl.QueueLeader(ctxT(t, time.Minute), l.q)
	if err != nil {
		t.Fatal(err)
	}
	if leader != home.Name {
		t.Fatalf("the leader of %s is on %s; the test put it on %s", l.q, leader, home.Name)
	}
	at := time.Now()
	if err := home.Stop(ctxT(t, 2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(at)
	l.waitConfirms(200, time.Minute)
	after, err := cl.QueueLeader(ctxT(t, time.Minute), l.q)
	if err != nil {
		t.Fatal(err)
	}
	gap := l.maxGap(at)
	t.Logf("stopped the leader's node %s in %v; the new leader is %s; longest pause between confirms since %v", leader, stopped.Round(time.Millisecond), after, gap.Round(time.Millisecond))
	if after == leader {
		t.Errorf("the leader is still on the stopped node %s", leader)
	}
	if err := home.Start(ctxT(t, 3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	l.waitConfirms(200, time.Minute)
	r := l.finish()
	t.Logf("stop the leader's node: %v; failed Sends: %v", r, l.errorsSeen())
	if strings.Contains(l.logs.String(), "acemq: rabbitmq connection lost") {
		t.Errorf("the Conn lost its connection though its node stayed up:\n%s", l.logs.String())
	}
}

// TestRollingRestart stops and starts each node in turn, gracefully, as a
// rolling upgrade does, under the same load: nothing confirmed is lost.
func TestRollingRestart(t *testing.T) {
	cl := needCluster(t)
	l := startLoad(t, cl, loadConfig{})
	var gaps []time.Duration
	for _, n := range cl.Nodes {
		at := time.Now()
		if err := n.Stop(ctxT(t, 2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		l.waitConfirms(200, time.Minute)
		if err := n.Start(ctxT(t, 3*time.Minute)); err != nil {
			t.Fatal(err)
		}
		l.waitConfirms(200, time.Minute)
		gaps = append(gaps, l.maxGap(at))
	}
	r := l.finish()
	t.Logf("rolling restart: %v; longest pause between confirms per node %v; failed Sends: %v", r, gaps, l.errorsSeen())
}

// TestClassicQueueNodeDies is what happens to a classic queue in a
// cluster: it lives on one node, and while that node is down the queue is
// gone from the others. Sends to it fail (none is reported sent), the
// consumer stops consuming and Health says so; when the node is back the
// consumer resumes and every message confirmed before is handled.
func TestClassicQueueNodeDies(t *testing.T) {
	cl := needCluster(t)
	home := cl.Nodes[0]
	l := startLoad(t, cl, loadConfig{classic: true, senders: 2, home: home, avoid: home})
	at := time.Now()
	if err := home.Kill(); err != nil {
		t.Fatal(err)
	}
	var health error
	deadline := time.Now().Add(time.Minute)
	for {
		health = l.c.Health(ctxT(t, 10*time.Second))
		if health != nil && strings.Contains(health.Error(), "not consuming") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Health did not report the consumer down within a minute: %v", health)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("Health while %s is down: %v", home.Name, health)
	before := l.confirmedCount()
	time.Sleep(3 * time.Second)
	during := l.confirmedCount() - before
	errs := l.errorsSeen()
	t.Logf("while the queue's node was down: %d Sends confirmed, failures %v", during, errs)
	if len(errs) == 0 {
		t.Error("no Send failed while the queue's node was down")
	}
	if err := home.Start(ctxT(t, 3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	d := l.waitResumed(time.Now(), 2*time.Minute)
	l.waitConfirms(100, time.Minute)
	deadline = time.Now().Add(time.Minute)
	for l.c.Health(ctxT(t, 10*time.Second)) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Health after the node came back: %v", l.c.Health(ctxT(t, 10*time.Second)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := l.finish()
	t.Logf("classic queue, its node killed for %v: %v; Sends confirmed again %v after the restart", time.Since(at).Round(time.Second), r, d.Round(time.Millisecond))
}

// TestURLListOnTheCluster: a Conn given the list reports the node it uses,
// and one dead node in the list does not stop Connect.
func TestURLListOnTheCluster(t *testing.T) {
	cl := needCluster(t)
	n := cl.Nodes[2]
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		tr, err := rabbitmq.Dial(ctxT(t, 30*time.Second), cl.URLs(), rabbitmq.Config{})
		if err != nil {
			t.Fatalf("Dial with one node dead: %v", err)
		}
		if got := cl.Node(tr.Node()); got == nil || got == n {
			t.Errorf("Node() = %q, want a live node of the cluster", tr.Node())
		}
		_ = tr.Close()
	}
}

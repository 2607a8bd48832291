package clustertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

// TestDelayedMessagesSurviveANodeKill (SPEC §20): 5,000 delayed messages
// wait in the delay topology's quorum queues while the node holding the
// leader of the level most of them wait in is SIGKILLed; every one arrives,
// none before its due time, once the node is back.
func TestDelayedMessagesSurviveANodeKill(t *testing.T) {
	cl := needCluster(t)
	const n, batch = 5000, 500
	ctx := ctxT(t, 10*time.Minute)
	c, err := acemq.Connect(ctx, cl.URLs(), acemq.WithQuorumQueues())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := acemqtest.QueueName(t, "delayed")
	acemqtest.DeleteQueuesAfter(t, cl.Nodes[0].URL(), q, acemq.RetryQueue(q, time.Second))

	var (
		mu   sync.Mutex
		got  = make(map[string]time.Time, n)
		due  = make(map[string]time.Time, n)
		done = make(chan struct{})
	)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[acemq.Raw]) acemq.Ack {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := got[m.Envelope.ID]; !ok {
			got[m.Envelope.ID] = time.Now()
			if len(got) == n {
				close(done)
			}
		}
		return acemq.Done()
	}, acemq.Concurrency(8), acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 2, Delays: []time.Duration{time.Second}}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(runCtx) }()
	defer func() { stop(); <-ran }()

	// Delays of 20 to 29 s: every message spends its first 16 s in level
	// acemq.delay.level.07, whose leader the kill takes down.
	pub := acemq.NewPublisher[acemq.Raw](c, "", q)
	for b := range n / batch {
		d := 20*time.Second + time.Duration(b)*time.Second
		vs := make([]acemq.Raw, batch)
		ids := make([]string, batch)
		for i := range vs {
			ids[i] = fmt.Sprintf("m-%d-%d", b, i)
			vs[i] = acemq.Raw(ids[i])
		}
		at := time.Now().Add(d)
		for i, r := range pub.SendAll(ctx, vs, acemq.At(at)) {
			if r.Err != nil {
				t.Fatalf("message %d of batch %d: %v", i, b, r.Err)
			}
			mu.Lock()
			due[r.ID] = at
			mu.Unlock()
		}
	}
	leader, err := cl.QueueLeader(ctx, "acemq.delay.level.07")
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range cl.Nodes {
		if node.Name != leader {
			continue
		}
		if err := node.Kill(); err != nil {
			t.Fatal(err)
		}
		t.Logf("killed %s, the leader of acemq.delay.level.07, with %d delayed messages waiting", leader, n)
		time.Sleep(5 * time.Second)
		if err := node.Start(ctxT(t, 3*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d delayed messages arrived within 5 minutes of the kill", len(got), n)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, at := range got {
		if at.Before(due[id]) {
			t.Errorf("message %s arrived %s before its due time", id, due[id].Sub(at))
		}
	}
	t.Logf("all %d delayed messages arrived, none early", n)
}

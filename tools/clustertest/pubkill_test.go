package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// TestOrderedPublisherNodeKilled: the node an ordered publisher is
// connected to is SIGKILLed while it sends each key's messages in batches
// of 10 (PublishBatch, what SendAll does), so that up to 10 of one key are
// in flight when the connection dies. An ordered consumer (P = 12, quorum
// queues) on a node that stays up handles them. Per key, the numbers handled
// for the first time never go back: the publishes lost with the connection
// are sent again before anything later of their key. Second copies (a
// publish the broker had taken before the node died, sent again) are
// counted, and so is any publish that failed for good and was sent again
// by the test after the rest of its batch (its order is the test's, not
// the transport's, and it is left out of the check).
func TestOrderedPublisherNodeKilled(t *testing.T) {
	cl := needCluster(t)
	const partitions, keys, per, batch, senders = 12, 200, 40, 10, 20
	q := acemqtest.QueueName(t, "pubkill")
	t.Cleanup(func() { deleteOrdered(t, cl, q, partitions) })
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rec := &stepLog{how: map[string][]string{}, seen: map[string][]int{}, done: map[string]map[int]bool{}}

	// The publisher first, anywhere; the consumer on another node.
	pub, err := acemq.Connect(ctxT(t, time.Minute), cl.URLs(), acemq.WithLogger(logger.With("conn", "publisher")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	pubTr := pub.Transport().(*rabbitmq.Transport)
	killed := cl.Node(pubTr.Node())
	if killed == nil {
		t.Fatalf("the publisher is on %q, no node of the cluster", pubTr.Node())
	}
	var others []string
	for _, n := range cl.Nodes {
		if n != killed {
			others = append(others, n.URL())
		}
	}
	sub, err := acemq.Connect(ctxT(t, time.Minute), strings.Join(others, ","), acemq.WithLogger(logger.With("conn", "consumer")), acemq.WithQuorumQueues())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	cons, err := acemq.NewConsumer(sub, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		rec.start(m.Payload, fmt.Sprint(m.Payload.N))
		rec.handled(m.Payload)
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: partitions}), acemq.Concurrency(8), acemq.DeclareContext(ctxT(t, time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-ran })
	for start := time.Now(); len(cons.Partitions()) < partitions; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > time.Minute {
			t.Fatalf("the consumer holds %v of %d partitions after a minute", cons.Partitions(), partitions)
		}
	}

	// Each sender owns keys/senders keys and sends them round-robin, one
	// batch of 10 numbers of one key at a time. The node dies once a third
	// of the batches are confirmed.
	bp := pub.Transport().(transport.BatchPublisher)
	var sent, inFlight atomic.Int64
	killAt := int64(keys * per / batch / 3)
	killedAt := make(chan time.Time, 1)
	var failedMu sync.Mutex
	failed := map[string]map[int]bool{} // per key: numbers the test sent again itself
	ctx := ctxT(t, 2*time.Minute)
	var wg sync.WaitGroup
	start := time.Now()
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := 1; from <= per; from += batch {
				for k := s; k < keys; k += senders {
					key := fmt.Sprintf("order-%03d", k)
					ms := make([]transport.Message, 0, batch)
					for n := from; n < from+batch && n <= per; n++ {
						body, _ := json.Marshal(Step{Key: key, N: n})
						ms = append(ms, transport.Message{
							Exchange: q, MessageID: fmt.Sprintf("%s-%d-%d", q, k, n), Type: "Step", ContentType: "application/json",
							Headers: map[string]any{"x-acemq-key": key}, Body: body,
						})
					}
					for i, err := range bp.PublishBatch(ctx, ms) {
						if err == nil {
							continue
						}
						failedMu.Lock()
						if failed[key] == nil {
							failed[key] = map[int]bool{}
						}
						failed[key][from+i] = true
						failedMu.Unlock()
						for err != nil {
							if ctx.Err() != nil {
								t.Errorf("publishing %s: %v", ms[i].MessageID, err)
								return
							}
							time.Sleep(50 * time.Millisecond)
							err = pub.Transport().Publish(ctx, ms[i])
						}
					}
					if sent.Add(1) == killAt {
						inFlight.Store(int64(pubTr.Outstanding()))
						if err := killed.Kill(); err != nil {
							t.Errorf("killing %s: %v", killed.Name, err)
							return
						}
						killedAt <- time.Now()
					}
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var at time.Time
	select {
	case at = <-killedAt:
	default:
		t.Fatal("the publisher's node was never killed")
	}
	t.Logf("%d messages published in %v; %s, the publisher's node, SIGKILLed %v after the first publish with %d publishes unconfirmed; the publisher is on %s now",
		keys*per, time.Since(start).Round(time.Millisecond), killed.Name, at.Sub(start).Round(time.Millisecond), inFlight.Load(), pubTr.Node())

	for wait := time.Now().Add(time.Minute); rec.total() < keys*per; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(wait) {
			byRound, which := rec.missing(keys, per)
			t.Fatalf("%d of %d handled a minute after the last publish; missing by number: %v; the first: %v", rec.total(), keys*per, byRound, which)
		}
	}
	// Back before the cleanup: deleting a quorum queue waits for its
	// members.
	if err := killed.Start(ctxT(t, 3*time.Minute)); err != nil {
		t.Fatalf("restarting %s: %v", killed.Name, err)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "rabbitmq reconnected") || strings.Contains(line, "reopening the publishing channel") || strings.Contains(line, "connection lost") {
			t.Log(line)
		}
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	inversions, dups, resent := 0, 0, 0
	for k := range keys {
		key := fmt.Sprintf("order-%03d", k)
		first := map[int]bool{}
		last := 0
		for _, n := range rec.seen[key] {
			if first[n] {
				dups++
				continue
			}
			first[n] = true
			if failed[key][n] {
				resent++
				continue
			}
			if n < last {
				inversions++
				t.Errorf("key %s: %d handled for the first time after %d: %v", key, n, last, rec.seen[key])
			}
			last = n
		}
	}
	t.Logf("per key the first-time order held with %d inversions; %d second copies; %d publishes failed and were sent again by the test", inversions, dups, resent)
}

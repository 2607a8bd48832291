package clustertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

// startedInstance is one instance startAll started: its consumer, or the
// error NewConsumer gave, and how long NewConsumer took.
type startedInstance struct {
	cons *acemq.Consumer[Step]
	err  error
	took time.Duration
	ran  chan error // Run's result, when it ran
}

// startAll creates an ordered consumer of q on quorum queues on each Conn,
// the i-th asking for counts[i] partitions, all released at one moment and
// each then starting within spread, as the processes of one deploy do; it
// runs those that came up until stop is called (or the test ends).
func startAll(t *testing.T, conns []*acemq.Conn, q string, counts []int, spread time.Duration) (ins []*startedInstance, stop func()) {
	h := func(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() }
	ctx, cancel := context.WithCancel(context.Background())
	ins = make([]*startedInstance, len(conns))
	barrier := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range conns {
		in := &startedInstance{}
		ins[i] = in
		wg.Go(func() {
			<-barrier
			time.Sleep(rand.N(spread))
			start := time.Now()
			in.cons, in.err = acemq.NewConsumer(c, q, h,
				acemq.Ordered(acemq.OrderPolicy{Partitions: counts[i]}), acemq.DeclareContext(ctxT(t, time.Minute)))
			in.took = time.Since(start)
			if in.err != nil {
				return
			}
			in.ran = make(chan error, 1)
			go func() { in.ran <- in.cons.Run(ctx) }()
		})
	}
	close(barrier)
	wg.Wait()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			for i, in := range ins {
				if in.ran == nil {
					continue
				}
				select {
				case err := <-in.ran:
					if err != nil && !errors.Is(err, acemq.ErrClosed) {
						t.Errorf("instance %d: Run returned %v", i, err)
					}
				case <-time.After(30 * time.Second):
					t.Errorf("instance %d: Run did not return within 30s of its ctx ending", i)
				}
			}
		})
	}
	t.Cleanup(stop)
	return ins, stop
}

// allHeld waits until the running instances together hold every one of p
// partitions, failing when one's Run returns first or within passes.
func allHeld(ins []*startedInstance, p int, within time.Duration) error {
	for end := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		var all []int
		for i, in := range ins {
			if in.ran == nil {
				continue
			}
			select {
			case err := <-in.ran:
				in.ran <- err
				return fmt.Errorf("instance %d: Run returned %v", i, err)
			default:
			}
			all = append(all, in.cons.Partitions()...)
		}
		slices.Sort(all)
		if all = slices.Compact(all); len(all) == p {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("together they hold %v of the %d partitions after %v", all, p, within)
		}
	}
}

// TestOrderedSimultaneousStartsOnTheCluster (SPEC §16, simultaneous
// starts): six instances of an ordered consumer with 12 partitions on
// quorum queues, each on its own Conn, the Conns spread over the three
// nodes, started at the same moment against a queue nobody declared yet:
// all come up and together hold every partition, round after round on a
// fresh queue. A real count conflict is still refused, naming the count
// the broker has, also when the two counts start at the same moment.
func TestOrderedSimultaneousStartsOnTheCluster(t *testing.T) {
	cl := needCluster(t)
	const instances, rounds, parts = 6, 5, 12
	// Declaring 12 quorum queues on three nodes takes a while: the starts
	// are spread over about as long, so that one instance looks at the
	// queue while another one is declaring it.
	const spread = 500 * time.Millisecond
	conns := make([]*acemq.Conn, instances)
	for i := range conns {
		// Each lists the nodes from a different one, so they spread over
		// the cluster.
		var urls []string
		for j := range cl.Nodes {
			urls = append(urls, cl.Nodes[(i+j)%len(cl.Nodes)].URL())
		}
		c, err := acemq.Connect(ctxT(t, time.Minute), strings.Join(urls, ","),
			acemq.WithLogger(slog.New(slog.DiscardHandler)), acemq.WithQuorumQueues())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns[i] = c
	}
	counts := slices.Repeat([]int{parts}, instances)
	begin := time.Now()
	var failed []string
	var slowest time.Duration
	for round := range rounds {
		q := acemqtest.QueueName(t, "ordered")
		t.Cleanup(func() { deleteOrdered(t, cl, q, parts) })
		ins, stop := startAll(t, conns, q, counts, spread)
		up := true
		for i, in := range ins {
			slowest = max(slowest, in.took)
			if in.err != nil {
				up = false
				failed = append(failed, fmt.Sprintf("round %d, instance %d: %v", round, i, in.err))
			}
		}
		if up {
			if err := allHeld(ins, parts, 30*time.Second); err != nil {
				failed = append(failed, fmt.Sprintf("round %d: %v", round, err))
			}
		}
		stop()
	}
	t.Logf("%d of %d simultaneous starts failed (%d rounds of %d) in %v; the slowest NewConsumer took %v",
		len(failed), rounds*instances, rounds, instances, time.Since(begin).Round(time.Millisecond), slowest.Round(time.Millisecond))
	if len(failed) > 0 {
		t.Fatalf("every instance started at the same moment comes up, and together they hold all partitions; the first failures:\n%s",
			strings.Join(failed[:min(3, len(failed))], "\n"))
	}

	t.Run("conflict", func(t *testing.T) {
		q := acemqtest.QueueName(t, "ordered")
		t.Cleanup(func() { deleteOrdered(t, cl, q, parts) })
		h := func(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() }
		_, err := acemq.NewConsumer(conns[0], q, h, acemq.Ordered(acemq.OrderPolicy{Partitions: 4}), acemq.DeclareContext(ctxT(t, time.Minute)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = acemq.NewConsumer(conns[1], q, h, acemq.Ordered(acemq.OrderPolicy{Partitions: parts}), acemq.DeclareContext(ctxT(t, time.Minute)))
		if err == nil || !strings.Contains(err.Error(), "asks for 12 partitions, but the queue was declared with 4") {
			t.Fatalf("a 12 after a 4: %v; want it refused, naming the 4", err)
		}
	})
	t.Run("conflict at once", func(t *testing.T) {
		q := acemqtest.QueueName(t, "ordered")
		t.Cleanup(func() { deleteOrdered(t, cl, q, parts) })
		mixed := []int{4, parts, 4, parts, 4, parts}
		ins, _ := startAll(t, conns, q, mixed, spread)
		w := 0
		for i, in := range ins {
			if in.err == nil {
				w = mixed[i]
				break
			}
		}
		if w == 0 {
			t.Fatalf("no count was declared: %v", ins[0].err)
		}
		for i, in := range ins {
			want := fmt.Sprintf("asks for %d partitions, but the queue was declared with %d", mixed[i], w)
			switch {
			case mixed[i] == w && in.err != nil:
				t.Errorf("instance %d asks for the count declared, %d: %v", i, w, in.err)
			case mixed[i] != w && (in.err == nil || !strings.Contains(in.err.Error(), want)):
				t.Errorf("instance %d asks for %d, but %d was declared: %v; want it refused, naming the %d", i, mixed[i], w, in.err, w)
			}
		}
		if err := allHeld(ins, w, 30*time.Second); err != nil {
			t.Error(err)
		}
	})
}

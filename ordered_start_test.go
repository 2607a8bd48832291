package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/require"
)

// started is one instance that startTogether started: its consumer, or
// the error NewConsumer or Run gave.
type started struct {
	cons *acemq.Consumer[Step]
	err  error
	ran  chan error // Run's result, when it ran
}

// startTogether creates an ordered consumer of q on each Conn, the i-th
// asking for counts[i] partitions, all released at one moment and each
// then starting within startSpread, as the processes of one deploy do; it
// runs those that came up until the test ends (or stop is called). It
// returns once every NewConsumer has returned.
func startTogether(t *testing.T, conns []*acemq.Conn, q string, counts []int) (ins []*started, stop func()) {
	t.Helper()
	h := func(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() }
	ctx, cancel := context.WithCancel(context.Background())
	ins = make([]*started, len(conns))
	barrier := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range conns {
		in := &started{}
		ins[i] = in
		wg.Go(func() {
			<-barrier
			time.Sleep(rand.N(startSpread))
			in.cons, in.err = acemq.NewConsumer(c, q, h,
				acemq.Ordered(acemq.OrderPolicy{Partitions: counts[i]}), acemq.DeclareContext(ctxT(t)))
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
				case <-time.After(10 * time.Second):
					t.Errorf("instance %d: Run did not return within 10s of its ctx ending", i)
				}
			}
		})
	}
	t.Cleanup(stop)
	return ins, stop
}

// startSpread is how far apart startTogether's instances start: about as
// long as declaring an ordered queue of 12 partitions takes on RabbitMQ, so
// that one instance looks at the queue while another is declaring it.
const startSpread = 100 * time.Millisecond

// heldTogether waits until the running instances together hold every one
// of p partitions, failing when one's Run returns first or within fails.
func heldTogether(ins []*started, p int, within time.Duration) error {
	for end := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
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

// TestOrderedSimultaneousStarts (SPEC §16, simultaneous starts): six
// instances of one ordered consumer, each on its own Conn, started at the
// same moment against a queue nobody declared yet, all come up and
// together hold every partition, round after round on a fresh queue. A
// real count conflict is still refused, naming the count the broker has,
// also when the two counts start at the same moment: one count wins and
// every instance asking for the other is refused.
func TestOrderedSimultaneousStarts(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		const instances, rounds, parts = 6, 20, 12
		conns := make([]*acemq.Conn, instances)
		for i := range conns {
			conns[i] = connectURL(t, url)
		}
		counts := slices.Repeat([]int{parts}, instances)
		begin := time.Now()
		var failed []string
		for round := range rounds {
			q := orderedQueue(t, url, parts)
			ins, stop := startTogether(t, conns, q, counts)
			up := true
			for i, in := range ins {
				if in.err != nil {
					up = false
					failed = append(failed, fmt.Sprintf("round %d, instance %d: %v", round, i, in.err))
				}
			}
			if up {
				if err := heldTogether(ins, parts, 15*time.Second); err != nil {
					failed = append(failed, fmt.Sprintf("round %d: %v", round, err))
				}
			}
			stop()
		}
		t.Logf("%d of %d simultaneous starts failed (%d rounds of %d) in %v", len(failed), rounds*instances, rounds, instances, time.Since(begin).Round(time.Millisecond))
		if len(failed) > 0 {
			t.Fatalf("every instance started at the same moment comes up, and together they hold all partitions; the first failures:\n%s",
				strings.Join(failed[:min(3, len(failed))], "\n"))
		}

		t.Run("conflict", func(t *testing.T) {
			q := orderedQueue(t, url, parts)
			h := func(context.Context, *acemq.Message[Step]) acemq.Ack { return acemq.Done() }
			_, err := acemq.NewConsumer(conns[0], q, h, acemq.Ordered(acemq.OrderPolicy{Partitions: 4}))
			require.NoError(t, err)
			_, err = acemq.NewConsumer(conns[1], q, h, acemq.Ordered(acemq.OrderPolicy{Partitions: parts}))
			require.ErrorContains(t, err, "asks for 12 partitions, but the queue was declared with 4")
			require.Equal(t, 1, countPrefix(err.Error()))
		})
		t.Run("conflict at once", func(t *testing.T) {
			q := orderedQueue(t, url, parts)
			mixed := []int{4, parts, 4, parts, 4, parts}
			ins, _ := startTogether(t, conns, q, mixed)
			var won []int
			for i, in := range ins {
				if in.err == nil {
					won = append(won, mixed[i])
				}
			}
			require.NotEmpty(t, won, "one count is declared")
			w := won[0]
			for i, in := range ins {
				if mixed[i] == w {
					require.NoError(t, in.err, "instance %d asks for the count declared, %d", i, w)
					continue
				}
				require.Error(t, in.err, "instance %d asks for %d, but %d was declared", i, mixed[i], w)
				require.True(t, strings.Contains(in.err.Error(), fmt.Sprintf("asks for %d partitions, but the queue was declared with %d", mixed[i], w)),
					"instance %d: %v", i, in.err)
			}
			require.NoError(t, heldTogether(ins, w, 15*time.Second))
		})
	})
}

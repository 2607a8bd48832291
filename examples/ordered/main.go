// Command ordered runs three instances of one ordered consumer in one
// process, on the in-process broker, each on its own Conn as separate
// processes would be. They spread the 12 partitions of the queue among
// themselves (4 each); one instance stops halfway and the other two take
// its partitions over (6 each). Every order's steps are checked: handled in
// the order they were sent, none missing, none of one order at once.
//
//	go run ./examples/ordered
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/acemq/acemq"
)

// Step is one event of one order; N counts the order's events from 1.
type Step struct {
	OrderID string `json:"orderId"`
	N       int    `json:"n"`
}

const (
	url        = "memory://ordered-example"
	queue      = "orders"
	partitions = 12
	orders     = 200
	perOrder   = 30
)

// book records what the handlers saw, per order.
type book struct {
	mu      sync.Mutex
	seen    map[string][]int
	running map[string]bool
	wrong   []string
	total   int
}

func (b *book) handle(instance int) acemq.Handler[Step] {
	return func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		s := m.Payload
		b.mu.Lock()
		if b.running[s.OrderID] {
			b.wrong = append(b.wrong, fmt.Sprintf("%s: two steps at once", s.OrderID))
		}
		b.running[s.OrderID] = true
		if prev := b.seen[s.OrderID]; len(prev) > 0 && s.N < prev[len(prev)-1] {
			b.wrong = append(b.wrong, fmt.Sprintf("%s: step %d after %d (instance %d)", s.OrderID, s.N, prev[len(prev)-1], instance))
		}
		b.seen[s.OrderID] = append(b.seen[s.OrderID], s.N)
		b.total++
		b.mu.Unlock()
		time.Sleep(200 * time.Microsecond) // a little work
		b.mu.Lock()
		b.running[s.OrderID] = false
		b.mu.Unlock()
		return acemq.Done()
	}
}

// instance is one running ordered consumer on its own Conn.
type instance struct {
	mq   *acemq.Conn
	cons *acemq.Consumer[Step]
	stop context.CancelFunc
	ran  chan error
	once sync.Once
	err  error
}

func start(ctx context.Context, n int, b *book) (*instance, error) {
	mq, err := acemq.Connect(ctx, url, acemq.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	cons, err := acemq.NewConsumer(mq, queue, b.handle(n),
		acemq.Ordered(acemq.OrderPolicy{Partitions: partitions}), acemq.Concurrency(4))
	if err != nil {
		return nil, errors.Join(err, mq.Close())
	}
	runCtx, stop := context.WithCancel(ctx)
	in := &instance{mq: mq, cons: cons, stop: stop, ran: make(chan error, 1)}
	go func() { in.ran <- cons.Run(runCtx) }()
	return in, nil
}

// close stops the instance once; a second call returns what the first did.
func (in *instance) close() error {
	in.once.Do(func() {
		in.stop()
		in.err = errors.Join(<-in.ran, in.mq.Close())
	})
	return in.err
}

// waitSpread waits until the instances hold want partitions each.
func waitSpread(ins []*instance, want int) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < 30*time.Second {
		ok := true
		for _, in := range ins {
			if len(in.cons.Partitions()) != want {
				ok = false
			}
		}
		if ok {
			return time.Since(start), nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("the instances did not hold %d partitions each within 30s", want)
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()
	b := &book{seen: map[string][]int{}, running: map[string]bool{}}
	var ins []*instance
	for n := range 3 {
		in, err := start(ctx, n+1, b)
		if err != nil {
			return err
		}
		defer in.close()
		ins = append(ins, in)
	}
	took, err := waitSpread(ins, partitions/3)
	if err != nil {
		return err
	}
	fmt.Printf("3 instances spread %d partitions in %v:\n", partitions, took.Round(100*time.Millisecond))
	for i, in := range ins {
		fmt.Printf("  instance %d holds %v\n", i+1, in.cons.Partitions())
	}

	// A publisher keyed by order; its own Conn, as a separate service.
	pubConn, err := acemq.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer pubConn.Close()
	pub := acemq.NewPublisher[Step](pubConn, queue, "",
		acemq.KeyBy(func(s Step) string { return s.OrderID }))
	for n := 1; n <= perOrder; n++ {
		if n == perOrder/2 {
			if err := ins[2].close(); err != nil {
				return err
			}
			fmt.Println("instance 3 stopped halfway")
		}
		batch := make([]Step, orders)
		for o := range batch {
			batch[o] = Step{OrderID: fmt.Sprintf("order-%03d", o), N: n}
		}
		for _, r := range pub.SendAll(ctx, batch) {
			if r.Err != nil {
				return r.Err
			}
		}
	}
	ins = ins[:2]
	if _, err = waitSpread(ins, partitions/2); err != nil {
		return err
	}
	fmt.Printf("2 instances spread the partitions again:\n")
	for i, in := range ins {
		fmt.Printf("  instance %d holds %v\n", i+1, in.cons.Partitions())
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		b.mu.Lock()
		done := len(b.seen) == orders && countAll(b.seen) >= orders*perOrder
		b.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("not every step was handled within a minute")
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for o, seq := range b.seen {
		for n := 1; n <= perOrder; n++ {
			if !slices.Contains(seq, n) {
				b.wrong = append(b.wrong, fmt.Sprintf("%s: step %d missing", o, n))
			}
		}
	}
	if len(b.wrong) > 0 {
		return fmt.Errorf("order broken: %v", b.wrong)
	}
	fmt.Printf("%d orders × %d steps: %d handled, every order in order, none missing\n", orders, perOrder, b.total)
	return nil
}

// countAll counts the distinct steps seen.
func countAll(seen map[string][]int) int {
	n := 0
	for _, seq := range seen {
		s := slices.Clone(seq)
		slices.Sort(s)
		n += len(slices.Compact(s))
	}
	return n
}

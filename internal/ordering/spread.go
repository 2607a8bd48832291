// Spreading the partitions of an ordered queue over the instances that
// consume it (SPEC §16).
//
// # What the broker keeps
//
// Two things, both of which the broker ends by itself when the connection
// that made them dies, so no instance has to say goodbye:
//
//   - Members. Every running spreader consumes the plain queue
//     {queue}.members (prefetch 1; nothing is ever published to it). Its
//     consumer count, read with a passive declare (Inspect), is N, the number
//     of live instances. Every instance reads the same number from the same
//     place.
//   - Slots. Each instance holds one lease {queue}.slot.{j} (an exclusive
//     queue on RabbitMQ: a second connection's declare fails with 405
//     RESOURCE_LOCKED, and the broker deletes it with its connection). Two
//     instances can never hold the same slot: the broker decides who wins,
//     also when both start at the same moment.
//
// # The rule
//
// An instance holding slot j holds the partitions {i : i mod N == j}, and
// none while j ≥ N. About every two seconds (with jitter, so instances
// started together do not tick together) each instance reads N again and,
// when j ≥ N, takes the lowest free slot below N and then gives up j. A free
// slot below N exists whenever every counted member holds a slot: N members
// in distinct slots, one of them at j ≥ N, leave at most N-1 of the N slots
// below N taken (pigeonhole). An instance without a slot (just started, or
// its lease was lost) takes the lowest free one, trying 0, 1, 2, … .
//
// Once no instance joins or leaves, all of them read the same N, hold
// distinct slots and move down until the slots taken are exactly 0 … N-1.
// The sets {i : i mod N == j} for j in 0 … N-1 are disjoint and cover all P
// partitions, with ⌊P/N⌋ or ⌈P/N⌉ in each. A join, a leave (run's ctx ends:
// the spreader cancels its member subscription and releases its slot) or a
// death (the broker drops the subscription and the slot together with the
// connection: on RabbitMQ at once when the socket closes, as when a process
// dies or a Conn closes; two to three heartbeat intervals after a peer goes
// silent) is seen by every other instance at its next tick, so the spread
// settles within a tick or two of the broker noticing. The broker noticing
// is also the earliest a partition can change hands, since its
// single-active-consumer queue keeps the dead subscription active until
// then.
//
// # Why a wrong answer is never unsafe
//
// The spreader only says which partitions to subscribe to. While instances
// disagree (one read N before a newcomer's subscription registered, a slot
// was lost and not yet taken again, a node was down and Inspect failed, so
// the last N was kept) two of them may both believe they hold a partition,
// or none may. Neither breaks order: the partition queues are
// single-active-consumer and the engine consumes them with ConsumeHandOver,
// so the broker lets one subscription at a time receive a partition's
// messages; a new holder waits as the standby until the old holder has
// closed its channel, which it does only after its in-flight messages
// settled (or when its connection is gone, and then the broker puts them back
// in order). A disagreement costs time, never order, and it ends at the next
// tick. A lost lease means the connection is gone, and with it every
// partition subscription of that instance, so the spreader drops all its
// partitions at once and takes a slot again once the transport is back.
// Leases are never taken again by the transport after a reconnect; only the
// spreader decides, so a reconnected instance never holds two slots. The
// broker would let a connection declare its own exclusive queue again, so
// both transports also refuse a lease they hold already: two spreaders of
// one queue on one Conn never share a slot. The transport declares
// {queue}.members again after a reconnect, and the spreader declares it
// again when it finds it gone (deleted by hand); a stale count in between
// only delays the spread.
//
// # What keeps it moving
//
// A tick waits for the broker at most four periods (at least 5 s) and ends
// at once when the slot is lost, so a broker call that waits for a
// reconnection never keeps run from dropping its partitions or from ending.
// A slot whose Release failed, or whose Lease failed midway, may still be
// held by this connection with no instance behind it; such a slot would
// break the pigeonhole for everyone, so each tick takes it again (a
// connection may take its own) and releases it.

package ordering

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/acemq/acemq/transport"
)

// spreadPeriod is how often a spreader looks at the member count and its
// slot, on average.
const spreadPeriod = 2 * time.Second

// minTickLimit is the least time one tick may wait for the broker (four
// periods when longer).
const minTickLimit = 5 * time.Second

// maxSlotTries bounds the slots a spreader tries beyond the member count
// when every lower one is taken: each taken slot is a live instance, so
// only a broken transport gets that far.
const maxSlotTries = 4096

// Spreader decides which partitions of an ordered queue this instance
// holds.
type Spreader struct {
	t          transport.Transport
	leaser     transport.Leaser
	queue      string
	partitions int
	log        *slog.Logger

	// period is the average time between two ticks; each tick waits a
	// random 75–125% of it.
	period time.Duration

	// OnLost, when set before Run, is called when the slot's lease is
	// lost, before the partitions are dropped: they are another
	// instance's already, unlike partitions given up by a rebalance.
	OnLost func()

	mu   sync.Mutex
	busy bool // guarded by mu; Run is running
}

// NewSpreader returns the spreader of queue's partitions 0 … partitions-1
// on b, whose Leaser it needs, ticking about every period (spreadPeriod
// when 0). Its errors have no prefix: they reach the user through the
// root's Run, which adds acemq's.
func NewSpreader(b Broker, queue string, partitions int, period time.Duration) (*Spreader, error) {
	if b.T == nil {
		return nil, fmt.Errorf("ordered queue %q: the transport is nil", queue)
	}
	if queue == "" {
		return nil, errors.New("an ordered queue needs a name")
	}
	if partitions < 1 {
		return nil, fmt.Errorf("ordered queue %q: %d partitions (want at least 1)", queue, partitions)
	}
	if b.Leaser == nil {
		return nil, fmt.Errorf("ordered queue %q: the transport %T cannot hold leases (it is not a transport.Leaser), "+
			"which spreading partitions over instances needs", queue, b.T)
	}
	if period <= 0 {
		period = spreadPeriod
	}
	return &Spreader{
		t: b.T, leaser: b.Leaser, queue: queue, partitions: partitions, log: b.logger(), period: period,
	}, nil
}

// membersQueue is {queue}.members (MembersTopology).
func (s *Spreader) membersQueue() transport.Queue { return MembersTopology(s.queue) }

// membersExpiry is how long {queue}.members outlives its last member.
const membersExpiry = 30 * time.Minute

// MembersTopology is {queue}.members: a durable classic queue, also under
// quorum, that the broker deletes once no instance has used it for
// membersExpiry (x-expires). Not quorum: RabbitMQ 3.10 counts a quorum
// queue's consumers from its state, which keeps a subscription whose node
// is down (marked suspected) until that node is back, so the count said
// N+1 for as long as a killed node stayed down and the partitions of slot
// N had no holder. A classic queue drops the subscriptions of a lost node
// at once. Not transient (durable false, which it was until RabbitMQ 4
// deprecated transient non-exclusive queues): a durable one whose node is
// down cannot be counted or declared elsewhere until the node is back, so
// tick keeps the last count meanwhile and goes on taking slots with it.
func MembersTopology(queue string) transport.Queue {
	return transport.Queue{Name: MembersQueue(queue), Args: map[string]any{"x-expires": membersExpiry.Milliseconds()}}
}

func (s *Spreader) slotName(j int) string { return s.queue + ".slot." + strconv.Itoa(j) }

// slotState is what run's goroutine alone knows.
type slotState struct {
	lease    transport.Lease // nil without a slot
	j        int             // the slot lease holds
	n        int             // the last member count read; 0 before the first
	declared bool            // the members queue was declared

	// stale are slots this connection may hold without a Lease to show
	// for it: a Release that failed, or a Lease that failed midway. Each
	// tick takes them again (a connection may) and releases them, so no
	// slot stays locked with nobody behind it.
	stale []int
}

// Run takes part in the spread until ctx ends. It calls onChange from its
// own goroutine with the sorted partitions each time they change (an empty,
// non-nil slice when it holds none), and with nil before it returns. It
// returns nil once ctx has ended, with its member subscription ended and its
// slot released. Broker trouble (a node down, the connection lost) is
// logged and waited out with the last member count known; run returns an
// error only when the transport is closed or the members queue conflicts
// with the broker's.
func (s *Spreader) Run(ctx context.Context, onChange func(held []int)) error {
	s.mu.Lock()
	if s.busy {
		s.mu.Unlock()
		return fmt.Errorf("ordered queue %q: the spreader is already running", s.queue)
	}
	s.busy = true
	s.mu.Unlock()
	if onChange == nil {
		onChange = func([]int) {}
	}

	st := &slotState{j: -1}
	var cur []int // what onChange was told last
	memberCtx, stopMember := context.WithCancel(ctx)
	fatal := make(chan error, 1)
	var wg sync.WaitGroup
	defer func() {
		onChange(nil)
		stopMember()
		wg.Wait()
		s.release(ctx, st)
		s.mu.Lock()
		s.busy = false
		s.mu.Unlock()
	}()
	// Declare the members queue before subscribing to it, so the first
	// subscription finds it (a failure here is tried again by the ticks).
	if err := s.declare(ctx, st); err != nil {
		return err
	}
	wg.Go(func() { s.member(memberCtx, fatal) })
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		var lost <-chan struct{}
		if st.lease != nil {
			lost = st.lease.Lost()
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-fatal:
			return err
		case <-lost:
			if ctx.Err() != nil || closed(s.t) {
				// Run's ctx ended, or the Conn closed its transport: the
				// lease went with what the owner asked for.
				s.log.Debug("acemq: ordered queue's slot ended with its connection, which is closing",
					"queue", s.queue, "slot", st.j)
			} else {
				s.log.Warn("acemq: ordered queue lost its slot (the connection is gone); it holds no partition until it takes one again",
					"queue", s.queue, "slot", st.j)
			}
			if s.OnLost != nil {
				s.OnLost()
			}
			st.lease, st.j = nil, -1
			cur = change(cur, []int{}, onChange)
			// Take a slot again at once: the lease calls wait for the
			// transport to be back.
		case <-timer.C:
		}
		if err := s.tickBounded(ctx, st); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		cur = change(cur, s.compute(st), onChange)
		timer.Reset(s.next(st))
	}
}

// closed reports whether t has been closed: a failure then is what its
// owner asked for (Conn.Close), not a fault, and is no warning. Both
// shipped transports say so, without I/O, before they end their leases
// and consumers; another transport's Health gets a second at most.
func closed(t transport.Transport) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return errors.Is(t.Health(ctx), transport.ErrClosed)
}

// tickBounded runs one tick with a deadline and ends it early when the
// slot is lost: while the connection is down the transport's calls wait for
// the next one, and run must still drop its partitions at once and end when
// its ctx does.
func (s *Spreader) tickBounded(ctx context.Context, st *slotState) error {
	limit := max(4*s.period, minTickLimit)
	tctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if st.lease != nil {
		lost, done := st.lease.Lost(), make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			select {
			case <-lost:
				cancel()
			case <-done:
			}
		})
		defer wg.Wait()
		defer close(done)
	}
	err := s.tick(tctx, st)
	if err == nil && ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded) {
		s.log.Warn("acemq: ordered queue's broker did not answer; trying again", "queue", s.queue, "waited", limit)
	}
	return err
}

// next is the wait before the next tick: about a period, shorter while the
// spreader has no slot or no member count yet.
func (s *Spreader) next(st *slotState) time.Duration {
	p := s.period
	if st.lease == nil || st.n < 1 {
		p /= 8
	}
	return time.Duration(float64(p) * (0.75 + rand.Float64()/2))
}

// compute is the partitions slot j of n holds.
func (s *Spreader) compute(st *slotState) []int {
	held := []int{}
	if st.lease == nil || st.n < 1 || st.j >= st.n {
		return held
	}
	for i := st.j; i < s.partitions; i += st.n {
		held = append(held, i)
	}
	return held
}

// change tells onChange held when it differs from cur, what it was told
// before, and returns what it was told last.
func change(cur, held []int, onChange func([]int)) []int {
	if slices.Equal(cur, held) { // nil (before the first tick) equals empty
		return cur
	}
	onChange(slices.Clone(held))
	return held
}

// declare declares the members queue once. A conflict with the broker's
// queue or a closed transport is an error; anything else is logged and
// tried again at the next tick.
func (s *Spreader) declare(ctx context.Context, st *slotState) error {
	if st.declared {
		return nil
	}
	err := s.t.Declare(ctx, s.membersQueue())
	switch {
	case err == nil:
		st.declared = true
		return nil
	case ctx.Err() != nil:
		return nil
	case errors.Is(err, transport.ErrTopologyConflict), errors.Is(err, transport.ErrClosed):
		return fmt.Errorf("ordered queue %q: declaring its members queue: %w", s.queue, err)
	}
	s.log.Warn("acemq: ordered queue could not declare its members queue; trying again",
		"queue", s.queue, "error", err)
	return nil
}

// tick reads the member count and takes, keeps or moves the slot. Only a
// closed transport or a conflicting members queue is an error.
func (s *Spreader) tick(ctx context.Context, st *slotState) error {
	// Counting gets half of the tick's time at most, so that a members
	// queue slow to answer (its node down, say) leaves time to look after
	// the slot with the last count.
	mctx, mcancel := context.WithTimeout(ctx, max(4*s.period, minTickLimit)/2)
	defer mcancel()
	if err := s.declare(mctx, st); err != nil {
		return err
	}
	members := s.membersQueue().Name
	info, err := transport.QueueInfo{}, error(nil)
	if st.declared {
		info, err = s.t.Inspect(mctx, members)
	}
	switch {
	case !st.declared:
		// Its node is down, say (declare logged why): keep the last count.
	case err == nil && info.Consumers > 0:
		if info.Consumers != st.n && st.n > 0 {
			s.log.Info("acemq: ordered queue sees another number of instances", "queue", s.queue,
				"instances", info.Consumers, "before", st.n)
		}
		st.n = info.Consumers
	case err == nil:
		// Not even this instance is counted: its subscription has not
		// registered yet, or is being resumed. Keep the last count.
	case errors.Is(err, transport.ErrClosed):
		return fmt.Errorf("ordered queue %q: counting its instances: %w", s.queue, err)
	case ctx.Err() != nil:
		return nil
	case errors.Is(err, transport.ErrNotFound):
		s.log.Warn("acemq: ordered queue's members queue is gone; declaring it again",
			"queue", s.queue, "members", members)
		st.declared = false
		if err := s.declare(mctx, st); err != nil {
			return err
		}
	default:
		s.log.Warn("acemq: ordered queue cannot count its instances; keeping the last count",
			"queue", s.queue, "instances", st.n, "error", err)
	}
	if err := s.cleanStale(ctx, st); err != nil {
		return err
	}
	if st.n < 1 {
		return nil // take a slot once this instance is counted
	}
	if st.lease == nil {
		return s.take(ctx, st, maxSlotTries+st.n)
	}
	if st.j >= st.n {
		old, oldJ := st.lease, st.j
		if err := s.take(ctx, st, st.n); err != nil || st.lease == old {
			return err
		}
		if err := old.Release(ctx); err != nil {
			s.log.Warn("acemq: ordered queue could not release its old slot; trying again", "queue", s.queue, "slot", oldJ, "error", err)
			st.stale = append(st.stale, oldJ)
		}
	}
	return nil
}

// take leases the lowest free slot below limit, leaving st as it was when
// all are taken or the broker cannot be reached.
func (s *Spreader) take(ctx context.Context, st *slotState, limit int) error {
	for k := 0; k < limit; k++ {
		if st.lease != nil && k >= st.j {
			return nil // no lower slot is free
		}
		l, err := s.leaser.Lease(ctx, s.slotName(k))
		switch {
		case err == nil:
			st.lease, st.j = l, k
			return nil
		case errors.Is(err, transport.ErrLocked):
			continue
		case errors.Is(err, transport.ErrClosed):
			return fmt.Errorf("ordered queue %q: taking a slot: %w", s.queue, err)
		default:
			// The broker may have made the lease before the call failed.
			st.stale = append(st.stale, k)
			if ctx.Err() == nil {
				s.log.Warn("acemq: ordered queue could not take a slot; trying again", "queue", s.queue, "slot", k, "error", err)
			}
			return nil
		}
	}
	if st.lease == nil {
		s.log.Warn("acemq: ordered queue found every slot taken", "queue", s.queue, "tried", limit)
	}
	return nil
}

// cleanStale takes each stale slot again and releases it; one another
// connection holds is not this instance's concern any more.
func (s *Spreader) cleanStale(ctx context.Context, st *slotState) error {
	keep := st.stale[:0]
	for _, k := range st.stale {
		if st.lease != nil && k == st.j || slices.Contains(keep, k) {
			continue
		}
		l, err := s.leaser.Lease(ctx, s.slotName(k))
		switch {
		case err == nil:
			if err := l.Release(ctx); err != nil {
				keep = append(keep, k)
			}
		case errors.Is(err, transport.ErrLocked):
		case errors.Is(err, transport.ErrClosed):
			return fmt.Errorf("ordered queue %q: releasing slot %d: %w", s.queue, k, err)
		default:
			keep = append(keep, k)
		}
	}
	st.stale = keep
	return nil
}

// member keeps this instance's subscription to the members queue for as
// long as ctx lasts, subscribing again after anything but a closed
// transport, which it reports on fatal.
func (s *Spreader) member(ctx context.Context, fatal chan<- error) {
	members := s.membersQueue().Name
	failures := 0
	for {
		err := s.t.Consume(ctx, members, 1, func(d transport.Delivery) {
			_ = d.Ack() // nothing belongs here; drop what someone put there
		})
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, transport.ErrClosed) {
			fatal <- fmt.Errorf("ordered queue %q: consuming its members queue: %w", s.queue, err)
			return
		}
		if err != nil {
			s.log.Warn("acemq: ordered queue's member subscription ended; subscribing again",
				"queue", s.queue, "members", members, "error", err)
		}
		if errors.Is(err, transport.ErrNotFound) {
			// run's tick declares it again too; whoever is first wins.
			_ = s.t.Declare(ctx, s.membersQueue())
		}
		failures++
		wait := min(s.period/8<<min(failures, 4), 2*s.period)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// release gives the slot up when run ends; ctx has usually ended, so it
// has a few seconds of its own.
func (s *Spreader) release(ctx context.Context, st *slotState) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// Once the transport is closed (Conn.Close), its connection and the
	// slots with it are gone as the owner asked: no warning.
	level := slog.LevelWarn
	if closed(s.t) {
		level = slog.LevelDebug
	}
	if err := s.cleanStale(rctx, st); err == nil && len(st.stale) > 0 {
		s.log.Log(rctx, level, "acemq: ordered queue could not release slots it may hold; they end with its connection",
			"queue", s.queue, "slots", st.stale)
	}
	st.stale = nil
	if st.lease == nil {
		return
	}
	if err := st.lease.Release(rctx); err != nil && !errors.Is(err, transport.ErrClosed) {
		if closed(s.t) {
			level = slog.LevelDebug
		}
		s.log.Log(rctx, level, "acemq: ordered queue could not release its slot", "queue", s.queue, "slot", st.j, "error", err)
	}
	st.lease, st.j = nil, -1
}

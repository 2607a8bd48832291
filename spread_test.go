package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// spreadPartitions is P in every spreading test.
const spreadPartitions = 12

// spreadDeadline is SPEC §16's bound on settling after a join, a leave or a
// death.
const spreadDeadline = 30 * time.Second

// spreadPeriod is the tick the tests give the spreaders: short, so the
// tests are quick, and long enough for RabbitMQ's round trips.
func spreadPeriod(url string) time.Duration {
	if strings.HasPrefix(url, "memory:") {
		return 50 * time.Millisecond
	}
	return 250 * time.Millisecond
}

// spreadTransport is the transport an instance's Conn uses: the broker's
// own, with its leases or a fakeLeaser's, and an Inspect that can be made
// to fail as it does while a node is down.
type spreadTransport struct {
	transport.Transport
	leaser      transport.Leaser
	failInspect atomic.Bool
}

func (s *spreadTransport) Lease(ctx context.Context, name string) (transport.Lease, error) {
	return s.leaser.Lease(ctx, name)
}

func (s *spreadTransport) Inspect(ctx context.Context, queue string) (transport.QueueInfo, error) {
	if s.failInspect.Load() {
		return transport.QueueInfo{}, errors.New("acemq: test: the node holding the queue is down")
	}
	return s.Transport.Inspect(ctx, queue)
}

func (s *spreadTransport) Close() error {
	if f, ok := s.leaser.(*fakeLeaser); ok {
		f.loseAll()
	}
	return s.Transport.Close()
}

// fakeLeases is a lease registry shared by the fakeLeasers of one test:
// leases that a test can lose, or fail to release, on purpose.
type fakeLeases struct {
	mu    sync.Mutex
	taken map[string]*fakeLease
}

type fakeLeaser struct {
	reg    *fakeLeases
	closed bool // guarded by reg.mu

	// failRelease makes the next Release fail as RabbitMQ's does when the
	// delete does not get through: the connection keeps the lease without a
	// Lease value, and a Lease of the name on it takes it again.
	failRelease atomic.Bool
}

type fakeLease struct {
	reg      *fakeLeases
	owner    *fakeLeaser
	name     string
	lost     chan struct{}
	once     sync.Once
	orphaned bool // guarded by reg.mu: a Release failed, the name is still held
}

func (f *fakeLeaser) Lease(ctx context.Context, name string) (transport.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.reg.mu.Lock()
	defer f.reg.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("acemq: test lease %q: %w", name, transport.ErrClosed)
	}
	if held, ok := f.reg.taken[name]; ok && !(held.owner == f && held.orphaned) {
		return nil, fmt.Errorf("acemq: test lease %q: %w", name, transport.ErrLocked)
	}
	l := &fakeLease{reg: f.reg, owner: f, name: name, lost: make(chan struct{})}
	f.reg.taken[name] = l
	return l, nil
}

// lose ends every lease f holds as a dead connection would; with final,
// f takes none again.
func (f *fakeLeaser) lose(final bool) {
	f.reg.mu.Lock()
	defer f.reg.mu.Unlock()
	f.closed = f.closed || final
	for name, l := range f.reg.taken {
		if l.owner == f {
			delete(f.reg.taken, name)
			l.once.Do(func() { close(l.lost) })
		}
	}
}

func (f *fakeLeaser) loseAll() { f.lose(true) }

func (l *fakeLease) Lost() <-chan struct{} { return l.lost }

func (l *fakeLease) Release(context.Context) error {
	l.reg.mu.Lock()
	defer l.reg.mu.Unlock()
	if l.reg.taken[l.name] == l && l.owner.failRelease.CompareAndSwap(true, false) {
		l.orphaned = true
		return fmt.Errorf("acemq: test release lease %q: the delete did not get through", l.name)
	}
	if l.reg.taken[l.name] == l {
		delete(l.reg.taken, l.name)
	}
	return nil
}

// spreadInstance is one instance: a Conn of its own and a spreader on it.
type spreadInstance struct {
	name string
	tr   *spreadTransport
	conn *acemq.Conn
	sp   *acemq.SpreaderForTest

	cancel context.CancelFunc
	done   chan error

	mu      sync.Mutex
	last    []int       // what onChange said last
	history [][]int     // everything onChange said
	at      []time.Time // when it said each
	ended   bool        // onChange said nil
}

// newSpreadInstance connects a Conn to url for queue. It takes its leases
// from reg when given, else from the transport.
// A RabbitMQ instance dials with cfg when given.
func newSpreadInstance(t *testing.T, url, queue, name string, reg *fakeLeases, quorum bool, cfg ...rabbitmq.Config) *spreadInstance {
	t.Helper()
	ctx := ctxT(t)
	var inner transport.Transport
	if name, ok := strings.CutPrefix(url, "memory://"); ok {
		inner = memory.New(strings.TrimSuffix(name, "/"))
	} else {
		c := rabbitmq.Config{}
		if len(cfg) > 0 {
			c = cfg[0]
		}
		c.Logger = quiet
		r, err := rabbitmq.Dial(ctx, url, c)
		require.NoError(t, err)
		inner = r
	}
	tr := &spreadTransport{Transport: inner}
	if reg != nil {
		tr.leaser = &fakeLeaser{reg: reg}
	} else {
		l, ok := inner.(transport.Leaser)
		require.True(t, ok, "%T is not a transport.Leaser", inner)
		tr.leaser = l
	}
	c, err := acemq.Connect(ctx, url, acemq.WithTransport(tr), acemq.WithLogger(quiet))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	sp, err := acemq.NewSpreaderForTest(c, queue, spreadPartitions, spreadPeriod(url))
	require.NoError(t, err)
	return &spreadInstance{name: name, tr: tr, conn: c, sp: sp}
}

// sibling is a second instance on in's Conn: two consumers of one ordered
// queue in one process share their connection.
func (in *spreadInstance) sibling(t *testing.T, url, queue, name string) *spreadInstance {
	t.Helper()
	sp, err := acemq.NewSpreaderForTest(in.conn, queue, spreadPartitions, spreadPeriod(url))
	require.NoError(t, err)
	return &spreadInstance{name: name, tr: in.tr, conn: in.conn, sp: sp}
}

func (in *spreadInstance) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel, in.done = cancel, make(chan error, 1)
	go func() { in.done <- in.sp.Run(ctx, in.onChange) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-in.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: run did not return 10 s after its ctx ended", in.name)
		}
	})
}

func (in *spreadInstance) onChange(held []int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.last = held
	in.history = append(in.history, held)
	in.at = append(in.at, time.Now())
	if held == nil {
		in.ended = true
	}
}

// said is what onChange said last.
func (in *spreadInstance) said() []int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.last
}

// stop ends run (a leave) and returns what it returned.
func (in *spreadInstance) stop(t *testing.T) error {
	t.Helper()
	in.cancel()
	return in.wait(t)
}

func (in *spreadInstance) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-in.done:
		in.done <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: run did not return within 10 s", in.name)
		return nil
	}
}

// balanced says why the instances' partitions are not yet P spread evenly
// without overlap, or "" when they are. It reads held and checks that
// onChange said the same.
func balanced(insts []*spreadInstance) string {
	n := len(insts)
	owner := make([]string, spreadPartitions)
	for _, in := range insts {
		held := in.sp.Held()
		if said := in.said(); !slices.Equal(held, said) && !(len(held) == 0 && len(said) == 0) {
			return fmt.Sprintf("%s holds %v but onChange said %v", in.name, held, said)
		}
		if len(held) != spreadPartitions/n && len(held) != (spreadPartitions+n-1)/n {
			return fmt.Sprintf("%s holds %d partitions %v, not %d or %d", in.name, len(held), held,
				spreadPartitions/n, (spreadPartitions+n-1)/n)
		}
		for _, i := range held {
			if owner[i] != "" {
				return fmt.Sprintf("partition %d is held by %s and %s", i, owner[i], in.name)
			}
			owner[i] = in.name
		}
	}
	for i, o := range owner {
		if o == "" {
			return fmt.Sprintf("partition %d is held by nobody", i)
		}
	}
	return ""
}

// settle waits until the instances are balanced, fails the test after
// spreadDeadline, then checks that they stay so, unchanged, for three
// ticks (the steady state never has two holders). It returns the time to
// settle.
func settle(t *testing.T, url string, insts []*spreadInstance) time.Duration {
	t.Helper()
	start := time.Now()
	why := ""
	for {
		if why = balanced(insts); why == "" {
			break
		}
		if time.Since(start) > spreadDeadline {
			t.Fatalf("not balanced %v after the change: %s", spreadDeadline, why)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	before := make([][]int, len(insts))
	for i, in := range insts {
		before[i] = in.sp.Held()
	}
	for end := time.Now().Add(3 * spreadPeriod(url)); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		require.Empty(t, balanced(insts), "the steady state changed")
		for i, in := range insts {
			require.Equal(t, before[i], in.sp.Held(), "%s changed its partitions in the steady state", in.name)
		}
	}
	return took
}

// spreadQueue names the ordered queue of a test and deletes its members
// queue when the test ends (the slots are leases that end with their
// connections).
func spreadQueue(t *testing.T, url string) string {
	q := acemqtestQueue(t)
	acemqtest.DeleteQueuesAfter(t, url, q+".members")
	return q
}

func TestSpreadBalancesInstancesStartedInAnyOrder(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		for n := 1; n <= 4; n++ {
			for _, together := range []bool{true, false} {
				name := fmt.Sprintf("%d instances started one by one", n)
				if together {
					name = fmt.Sprintf("%d instances started together", n)
				}
				t.Run(name, func(t *testing.T) {
					q := spreadQueue(t, url)
					insts := make([]*spreadInstance, n)
					for i := range insts {
						insts[i] = newSpreadInstance(t, url, q, fmt.Sprintf("instance %d", i), nil, false)
					}
					start := time.Now()
					if together {
						for _, in := range insts {
							in.start(t)
						}
					} else {
						// One after another in a random order, a random
						// part of a tick apart.
						for _, i := range rand.Perm(n) {
							insts[i].start(t)
							time.Sleep(rand.N(spreadPeriod(url)))
						}
					}
					settle(t, url, insts)
					t.Logf("%d instances balanced %v after the first started", n, time.Since(start).Round(time.Millisecond))
				})
			}
		}
	})
}

func TestSpreadQuorumMembers(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := spreadQueue(t, url)
		insts := []*spreadInstance{
			newSpreadInstance(t, url, q, "a", nil, true),
			newSpreadInstance(t, url, q, "b", nil, true),
		}
		for _, in := range insts {
			in.start(t)
		}
		settle(t, url, insts)
	})
}

// TestSpreadTwoOnOneConn: two spreaders of one queue on one Conn (whose
// leases belong to one connection) take distinct slots.
func TestSpreadTwoOnOneConn(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := spreadQueue(t, url)
		a := newSpreadInstance(t, url, q, "a", nil, false)
		b := a.sibling(t, url, q, "b")
		c := newSpreadInstance(t, url, q, "c", nil, false)
		for _, in := range []*spreadInstance{a, b, c} {
			in.start(t)
		}
		settle(t, url, []*spreadInstance{a, b, c})
		require.NoError(t, a.stop(t))
		settle(t, url, []*spreadInstance{b, c})
	})
}

// TestSpreadRunRefuses: run ends with an error, and onChange(nil), on a
// closed Conn and on a members queue that conflicts with the broker's.
func TestSpreadRunRefuses(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		t.Run("closed Conn", func(t *testing.T) {
			q := spreadQueue(t, url)
			a := newSpreadInstance(t, url, q, "a", nil, false)
			require.NoError(t, a.conn.Close())
			a.start(t)
			require.ErrorIs(t, a.wait(t), transport.ErrClosed)
			assert.True(t, a.ended, "onChange(nil) before run returned")
		})
		t.Run("members queue of another kind", func(t *testing.T) {
			q := spreadQueue(t, url)
			// The members queue is a transient classic queue, also under
			// quorum; a quorum one conflicts on every broker.
			a := newSpreadInstance(t, url, q, "a", nil, true)
			require.NoError(t, a.conn.Declare(ctxT(t), acemq.Queue{Name: q + ".members", Quorum: true}))
			a.start(t)
			err := a.wait(t)
			require.ErrorIs(t, err, transport.ErrTopologyConflict)
			assert.Contains(t, err.Error(), q+".members")
			assert.True(t, a.ended, "onChange(nil) before run returned")
		})
	})
}

// TestSpreadRebalancesOnDeathLeaveAndJoin runs 3 instances, closes one
// Conn under its running spreader (a death without goodbye), ends another's
// run (a leave), then starts two more, and times each rebalance.
func TestSpreadRebalancesOnDeathLeaveAndJoin(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := spreadQueue(t, url)
		a := newSpreadInstance(t, url, q, "a", nil, false)
		b := newSpreadInstance(t, url, q, "b", nil, false)
		c := newSpreadInstance(t, url, q, "c", nil, false)
		for _, in := range []*spreadInstance{a, b, c} {
			in.start(t)
		}
		settle(t, url, []*spreadInstance{a, b, c})

		require.NoError(t, c.conn.Close())
		took := settle(t, url, []*spreadInstance{a, b})
		t.Logf("death without goodbye: 2 instances balanced %v after the Conn closed", took.Round(time.Millisecond))
		err := c.wait(t)
		require.ErrorIs(t, err, transport.ErrClosed, "run on a closed Conn")
		assert.Nil(t, c.sp.Held())
		assert.True(t, c.ended, "onChange(nil) before run returned")

		require.NoError(t, b.stop(t))
		took = settle(t, url, []*spreadInstance{a})
		t.Logf("leave: 1 instance holds all %v after the other's run ended", took.Round(time.Millisecond))
		assert.Nil(t, b.sp.Held())

		d := newSpreadInstance(t, url, q, "d", nil, false)
		e := newSpreadInstance(t, url, q, "e", nil, false)
		d.start(t)
		e.start(t)
		took = settle(t, url, []*spreadInstance{a, d, e})
		t.Logf("join: 3 instances balanced %v after two started", took.Round(time.Millisecond))
	})
}

// TestSpreadLostLeaseDropsEverything loses an instance's slot as a dead
// connection would: it drops every partition at once, takes a slot again,
// and the spread settles.
func TestSpreadLostLeaseDropsEverything(t *testing.T) {
	t.Parallel()
	url := acemqtest.Memory(t)
	q := spreadQueue(t, url)
	reg := &fakeLeases{taken: map[string]*fakeLease{}}
	a := newSpreadInstance(t, url, q, "a", reg, false)
	b := newSpreadInstance(t, url, q, "b", reg, false)
	a.start(t)
	b.start(t)
	settle(t, url, []*spreadInstance{a, b})

	a.mu.Lock()
	seen := len(a.history)
	a.mu.Unlock()
	lostAt := time.Now()
	a.tr.leaser.(*fakeLeaser).lose(false)
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.history) > seen
	}, spreadDeadline, time.Millisecond, "a never noticed it lost its slot")
	settle(t, url, []*spreadInstance{a, b})
	took := time.Since(lostAt)
	t.Logf("lost lease: balanced again within %v (with the steady-state check)", took.Round(time.Millisecond))
	a.mu.Lock()
	after := slices.Clone(a.history[seen:])
	a.mu.Unlock()
	require.NotEmpty(t, after)
	assert.Empty(t, after[0], "the first change after the loss drops every partition; it was %v", after[0])
}

// TestSpreadReleasesASlotWhoseReleaseFailed: an instance that moved to a
// lower slot but could not release the old one (its connection still holds
// it) releases it at a later tick, so a newcomer can take it.
func TestSpreadReleasesASlotWhoseReleaseFailed(t *testing.T) {
	t.Parallel()
	url := acemqtest.Memory(t)
	q := spreadQueue(t, url)
	reg := &fakeLeases{taken: map[string]*fakeLease{}}
	a := newSpreadInstance(t, url, q, "a", reg, false)
	b := newSpreadInstance(t, url, q, "b", reg, false)
	c := newSpreadInstance(t, url, q, "c", reg, false)
	for _, in := range []*spreadInstance{a, b, c} {
		in.start(t)
	}
	insts := []*spreadInstance{a, b, c}
	settle(t, url, insts)
	// The holder of slot 2 (partition 2) moves to slot 0 when the holder of
	// slot 0 leaves, and fails to release slot 2.
	holder := func(partition int) int {
		return slices.IndexFunc(insts, func(in *spreadInstance) bool { return slices.Contains(in.sp.Held(), partition) })
	}
	leaver, mover := insts[holder(0)], insts[holder(2)]
	stay := slices.DeleteFunc(slices.Clone(insts), func(in *spreadInstance) bool { return in == leaver })
	mover.tr.leaser.(*fakeLeaser).failRelease.Store(true)
	require.NoError(t, leaver.stop(t))
	settle(t, url, stay)
	require.False(t, mover.tr.leaser.(*fakeLeaser).failRelease.Load(), "%s did not release slot 2", mover.name)
	d := newSpreadInstance(t, url, q, "d", reg, false)
	d.start(t)
	settle(t, url, append(stay, d))
}

// TestSpreadKeepsTheCountWhileInspectFails: while an instance cannot read
// the member count (a node down) it keeps the last one, and run goes on.
func TestSpreadKeepsTheCountWhileInspectFails(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := spreadQueue(t, url)
		a := newSpreadInstance(t, url, q, "a", nil, false)
		b := newSpreadInstance(t, url, q, "b", nil, false)
		a.start(t)
		b.start(t)
		settle(t, url, []*spreadInstance{a, b})
		held := a.sp.Held()
		a.tr.failInspect.Store(true)
		time.Sleep(4 * spreadPeriod(url))
		assert.Equal(t, held, a.sp.Held(), "the partitions while the count cannot be read")
		select {
		case err := <-a.done:
			t.Fatalf("run ended while Inspect failed: %v", err)
		default:
		}
		a.tr.failInspect.Store(false)
		settle(t, url, []*spreadInstance{a, b})
	})
}

// TestSpreadDeclaresMembersAgain deletes the members queue under running
// spreaders: they declare it again, subscribe again, and settle.
func TestSpreadDeclaresMembersAgain(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := spreadQueue(t, url)
		a := newSpreadInstance(t, url, q, "a", nil, false)
		b := newSpreadInstance(t, url, q, "b", nil, false)
		a.start(t)
		b.start(t)
		settle(t, url, []*spreadInstance{a, b})
		require.NoError(t, a.conn.Transport().DeleteQueue(ctxT(t), q+".members"))
		c := newSpreadInstance(t, url, q, "c", nil, false)
		c.start(t)
		took := settle(t, url, []*spreadInstance{a, b, c})
		t.Logf("members queue deleted and a third instance started: balanced %v later", took.Round(time.Millisecond))
		info, err := a.conn.Transport().Inspect(ctxT(t), q+".members")
		require.NoError(t, err)
		assert.Equal(t, 3, info.Consumers)
	})
}

// TestSpreadRunLeavesNothingBehind: once run returns, no goroutine of it
// runs, its member subscription and its slot are gone.
func TestSpreadRunLeavesNothingBehind(t *testing.T) {
	// Not parallel: it counts every goroutine of the process.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	url := acemqtest.Memory(t)
	q := acemqtestQueue(t)
	func() {
		a := newSpreadInstance(t, url, q, "a", nil, false)
		b := newSpreadInstance(t, url, q, "b", nil, false)
		a.start(t)
		b.start(t)
		settle(t, url, []*spreadInstance{a, b})
		require.NoError(t, a.stop(t))
		assert.True(t, a.ended, "onChange(nil) before run returned")
		assert.Nil(t, a.sp.Held())
		settle(t, url, []*spreadInstance{b})
		info, err := b.conn.Transport().Inspect(ctxT(t), q+".members")
		require.NoError(t, err)
		assert.Equal(t, 1, info.Consumers, "a's member subscription ended")
		// a's slot (the lowest free one, 0 or 1) can be taken again.
		l, err0 := b.tr.Lease(ctxT(t), q+".slot.0")
		if err0 != nil {
			l, err = b.tr.Lease(ctxT(t), q+".slot.1")
			require.NoError(t, err, "neither slot 0 (%v) nor slot 1 is free", err0)
		}
		require.NoError(t, l.Release(ctxT(t)))
		require.NoError(t, b.stop(t))
		require.NoError(t, a.conn.Close())
		require.NoError(t, b.conn.Close())
	}()
}

// TestSpreadConnectionDiesAndComesBack runs three instances on RabbitMQ,
// one of them through a proxy: its connection is killed (it comes back at
// once), then goes silent until the heartbeats find it dead (the other two
// take its partitions), then comes back.
func TestSpreadConnectionDiesAndComesBack(t *testing.T) {
	t.Parallel()
	url := acemqtest.RabbitMQ(t)
	q := spreadQueue(t, url)
	p := newSpreadProxy(t, url)
	a := newSpreadInstance(t, p.url, q, "a", nil, false, rabbitmq.Config{Heartbeat: time.Second, MaxBackoff: 500 * time.Millisecond})
	b := newSpreadInstance(t, url, q, "b", nil, false)
	c := newSpreadInstance(t, url, q, "c", nil, false)
	for _, in := range []*spreadInstance{a, b, c} {
		in.start(t)
	}
	settle(t, url, []*spreadInstance{a, b, c})

	// Killed: the socket closes, the broker drops a's subscription and slot
	// at once, a reconnects and takes a slot again.
	a.mu.Lock()
	seen := len(a.history)
	a.mu.Unlock()
	start := time.Now()
	p.cut()
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return slices.ContainsFunc(a.history[seen:], func(h []int) bool { return len(h) == 0 })
	}, spreadDeadline, time.Millisecond, "a never dropped its partitions after its connection was killed")
	a.mu.Lock()
	dropped := a.at[seen+slices.IndexFunc(a.history[seen:], func(h []int) bool { return len(h) == 0 })]
	a.mu.Unlock()
	settle(t, url, []*spreadInstance{a, b, c})
	t.Logf("connection killed: a dropped its partitions %v after the cut; 3 balanced again (and steady for 3 ticks) %v after it",
		dropped.Sub(start).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// Silent: only the heartbeats (1 s here) tell the broker a is gone.
	a.mu.Lock()
	seen = len(a.history)
	a.mu.Unlock()
	start = time.Now()
	p.freeze()
	took := settle(t, url, []*spreadInstance{b, c})
	t.Logf("connection silent: the other 2 balanced %v after it went silent", took.Round(time.Millisecond))
	require.Eventually(t, func() bool { return len(a.sp.Held()) == 0 }, spreadDeadline, time.Millisecond,
		"a kept its partitions after its connection went silent")
	a.mu.Lock()
	i := seen + slices.IndexFunc(a.history[seen:], func(h []int) bool { return len(h) == 0 })
	dropped = a.at[i]
	a.mu.Unlock()
	t.Logf("connection silent: a dropped its partitions %v after it went silent", dropped.Sub(start).Round(time.Millisecond))

	start = time.Now()
	p.thaw()
	settle(t, url, []*spreadInstance{a, b, c})
	t.Logf("connection back: 3 balanced %v after", time.Since(start).Round(time.Millisecond))
	require.NoError(t, a.stop(t))
}

package acemq_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/require"
)

// blockedAt10 is an ordered consumer whose key "k" is blocked at message
// 10 with 11…50 held: the handler fails 10 (Reject, or Park with park)
// while failing is set, and records every N it is given.
type blockedAt10 struct {
	t       *testing.T
	c       *acemq.Conn
	q       string
	failing atomic.Bool
	mu      sync.Mutex
	seen    []int
	blocked acemq.BlockedKey
}

func newBlockedAt10(t *testing.T, url string, park bool) *blockedAt10 {
	b := &blockedAt10{t: t, q: orderedQueue(t, url, 2, "k")}
	b.c = connectURL(t, url, acemq.WithRetryPolicy(inPlace))
	b.failing.Store(true)
	cons, err := acemq.NewConsumer(b.c, b.q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
		b.mu.Lock()
		b.seen = append(b.seen, m.Payload.N)
		b.mu.Unlock()
		if m.Payload.N == 10 && b.failing.Load() {
			if park {
				return acemq.Park(errors.New("customer 42 does not exist"))
			}
			return acemq.Reject(errors.New("customer 42 does not exist"))
		}
		return acemq.Done()
	}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2, BlockOnFailure: true}), acemq.Concurrency(4))
	require.NoError(t, err)
	run(t, cons)
	b.publish(1, 50)
	b.waitBlocked(40)
	require.Equal(t, seq(1, 10), b.handled(), "nothing after 10 ran while the key is blocked")
	return b
}

// publish sends k's messages from to to, in order.
func (b *blockedAt10) publish(from, to int) {
	var ms []transport.Message
	for n := from; n <= to; n++ {
		ms = append(ms, keyed(b.t, b.q, Step{Key: "k", N: n}))
	}
	publishAll(b.t, b.c, ms)
}

// waitBlocked waits until k is blocked with held messages held.
func (b *blockedAt10) waitBlocked(held int) {
	within(b.t, 30*time.Second, "k blocked with its held messages", func() bool {
		keys, err := acemq.BlockedKeys(ctxT(b.t), b.c, b.q)
		require.NoError(b.t, err)
		if len(keys) == 1 && keys[0].Held == held {
			b.blocked = keys[0]
			return true
		}
		return false
	})
}

func (b *blockedAt10) handled() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.seen)
}

// waitHandled waits until n messages were handled in all.
func (b *blockedAt10) waitHandled(n int) []int {
	within(b.t, 30*time.Second, "the released messages handled", func() bool { return len(b.handled()) >= n })
	return b.handled()
}

// waitReleased waits until the registry has no key and checks that the
// key's held and re-run queues are gone.
func (b *blockedAt10) waitReleased() {
	within(b.t, 10*time.Second, "the registry empty", func() bool {
		keys, err := acemq.BlockedKeys(ctxT(b.t), b.c, b.q)
		require.NoError(b.t, err)
		return len(keys) == 0
	})
	for _, name := range []string{heldQueueOf(b.q, "k"), rerunQueueOf(b.q, "k")} {
		_, err := b.c.Transport().Inspect(ctxT(b.t), name)
		require.ErrorIs(b.t, err, transport.ErrNotFound, "%s is deleted after the release", name)
	}
}

func seq(from, to int) []int {
	var out []int
	for n := from; n <= to; n++ {
		out = append(out, n)
	}
	return out
}

// TestReleaseRerun: ReleaseKey with RerunFailed runs the message that
// blocked the key (from .dlq) first, then the held 11…50, then newer ones;
// the message is no longer in .dlq, and the other dead letters, before and
// after it, are still there in their order.
func TestReleaseRerun(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		b := newBlockedAt10(t, url, false)
		ten := dead(t, b.c, b.q)
		require.Len(t, ten, 1)
		dlq := acemq.DeadLetterQueue(b.q)
		other := func(id string) transport.Message {
			return transport.Message{RoutingKey: dlq, MessageID: id, Body: []byte(id)}
		}
		back := ten[0].Message
		back.Exchange, back.RoutingKey = "", dlq
		publishAll(t, b.c, []transport.Message{other("o1"), other("o2"), back, other("o3")})

		b.failing.Store(false)
		require.NoError(t, acemq.ReleaseKey(ctxT(t), b.c, b.q, "k", acemq.RerunFailed()))
		b.publish(51, 55)
		got := b.waitHandled(10 + 46)
		require.Equal(t, append(seq(1, 10), seq(10, 55)...), got)
		b.waitReleased()
		var left []string
		for _, d := range dead(t, b.c, b.q) {
			left = append(left, d.MessageID)
		}
		require.Equal(t, []string{"o1", "o2", "o3"}, left, "the re-run message left .dlq, the others stayed in order")
	})
}

// TestReleaseRerunResumed: a release with a re-run that stopped after the
// move (the message in the key's re-run queue, no release sent) is
// finished by asking again; a release that skips it is refused meanwhile.
func TestReleaseRerunResumed(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		b := newBlockedAt10(t, url, false)
		ten := dead(t, b.c, b.q)
		require.Len(t, ten, 1)
		rq := rerunQueueOf(b.q, "k")
		require.NoError(t, b.c.Transport().Declare(ctxT(t), transport.Queue{Name: rq}))
		moved := ten[0].Message
		moved.Exchange, moved.RoutingKey = "", rq
		publishAll(t, b.c, []transport.Message{moved})

		err := acemq.ReleaseKey(ctxT(t), b.c, b.q, "k")
		require.ErrorContains(t, err, rq)
		require.ErrorContains(t, err, "RerunFailed")

		b.failing.Store(false)
		require.NoError(t, acemq.ReleaseKey(ctxT(t), b.c, b.q, "k", acemq.RerunFailed()))
		got := b.waitHandled(10 + 41)
		require.Equal(t, append(seq(1, 10), seq(10, 50)...), got)
		b.waitReleased()
	})
}

// TestReleaseSkip: ReleaseKey without an option (and with SkipFailed)
// runs the held 11…50 and newer ones, and leaves 10 in .dlq.
func TestReleaseSkip(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		b := newBlockedAt10(t, url, false)
		b.failing.Store(false)
		require.NoError(t, acemq.ReleaseKey(ctxT(t), b.c, b.q, "k", acemq.SkipFailed()))
		b.publish(51, 55)
		got := b.waitHandled(10 + 45)
		require.Equal(t, append(seq(1, 10), seq(11, 55)...), got)
		b.waitReleased()
		d := dead(t, b.c, b.q)
		require.Len(t, d, 1)
		require.Equal(t, b.blocked.MessageID, d[0].MessageID, "the failed message stays in .dlq")
	})
}

// TestReleaseRerunParked: a message that blocked its key by being parked
// is re-run from .parked.
func TestReleaseRerunParked(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		b := newBlockedAt10(t, url, true)
		b.failing.Store(false)
		require.NoError(t, acemq.ReleaseKey(ctxT(t), b.c, b.q, "k", acemq.RerunFailed()))
		got := b.waitHandled(10 + 41)
		require.Equal(t, append(seq(1, 10), seq(10, 50)...), got)
		b.waitReleased()
		_, ok, err := b.c.Transport().Get(ctxT(t), acemq.ParkingQueue(b.q))
		require.NoError(t, err)
		require.False(t, ok, "the re-run message left .parked")
	})
}

// TestReleaseRerunFailsAgain: a re-run that fails for good again blocks
// the key again with it as the marker, the held ones still held; once it
// is in no queue, a re-run is an error naming where ReleaseKey looked,
// and SkipFailed still releases.
func TestReleaseRerunFailsAgain(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		b := newBlockedAt10(t, url, false)
		first := b.blocked
		require.NoError(t, acemq.ReleaseKey(ctxT(t), b.c, b.q, "k", acemq.RerunFailed()))
		within(t, 30*time.Second, "10 run again", func() bool { return len(b.handled()) == 11 })
		b.waitBlocked(40)
		require.Equal(t, first.MessageID, b.blocked.MessageID, "10 blocks the key again")
		require.True(t, b.blocked.Since.After(first.Since) || b.blocked.Since.Equal(first.Since))
		require.Equal(t, append(seq(1, 10), 10), b.handled())

		d := dead(t, b.c, b.q) // 10 is in .dlq again; take it away
		require.Len(t, d, 1)
		require.Equal(t, first.MessageID, d[0].MessageID)
		err := acemq.ReleaseKey(ctxT(t), b.c, b.q, "k", acemq.RerunFailed())
		require.ErrorContains(t, err, "is in none of")
		require.ErrorContains(t, err, acemq.DeadLetterQueue(b.q))
		require.ErrorContains(t, err, acemq.ParkingQueue(b.q))

		b.failing.Store(false)
		require.NoError(t, acemq.ReleaseKey(ctxT(t), b.c, b.q, "k"))
		got := b.waitHandled(11 + 40)
		require.Equal(t, append(append(seq(1, 10), 10), seq(11, 50)...), got)
		b.waitReleased()
	})
}

// TestReleaseSkipThenRerun: a release without a re-run that reaches the
// holder after a re-run put the failed message in the re-run queue (both
// sent before the holder got to either) runs it too, first, rather than
// delete it with its queue.
func TestReleaseSkipThenRerun(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		b := newBlockedAt10(t, url, false)
		ten := dead(t, b.c, b.q)
		require.Len(t, ten, 1)
		rq := rerunQueueOf(b.q, "k")
		require.NoError(t, b.c.Transport().Declare(ctxT(t), transport.Queue{Name: rq}))
		moved := ten[0].Message
		moved.Exchange, moved.RoutingKey = "", rq
		b.failing.Store(false)
		// The release sent first, without a re-run, as ReleaseKey sends it.
		publishAll(t, b.c, []transport.Message{
			moved,
			{Exchange: b.q, MessageID: "release-1", Headers: map[string]any{"x-acemq-key": "k", "x-acemq-control": "release"}},
		})
		got := b.waitHandled(10 + 41)
		require.Equal(t, append(seq(1, 10), seq(10, 50)...), got)
		b.waitReleased()
	})
}

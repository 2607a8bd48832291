package ordering

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
)

// declareBroker connects a client to the memory broker b, as one instance.
func declareBroker(t *testing.T, b *memory.Broker) (Broker, *memory.Transport) {
	tr := b.Connect()
	t.Cleanup(func() { _ = tr.Close() })
	return Broker{T: tr, Leaser: tr}, tr
}

// lockWithin runs LockDeclare in the background and returns its result
// once it has one.
func lockWithin(ctx context.Context, b Broker, queue string) <-chan error {
	done := make(chan error, 1)
	go func() {
		l, err := LockDeclare(ctx, b, queue)
		if err == nil {
			l.Unlock(ctx)
		}
		done <- err
	}()
	return done
}

// Instances that lock at the same moment hold the lease one at a time, and
// each gets it.
func TestLockDeclareOneAtATime(t *testing.T) {
	t.Parallel()
	mb := memory.NewBroker()
	var holders, most, turns atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		b, _ := declareBroker(t, mb)
		wg.Go(func() {
			for range 5 {
				l, err := LockDeclare(context.Background(), b, "orders")
				if !assert.NoError(t, err) {
					return
				}
				n := holders.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				holders.Add(-1)
				turns.Add(1)
				l.Unlock(context.Background())
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), most.Load(), "holders at once")
	assert.Equal(t, int32(40), turns.Load(), "turns taken")
}

// A waiter gets the lease once its holder releases it, or once the
// holder's connection is gone without a release.
func TestLockDeclareWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		end  func(l *DeclareLock, tr *memory.Transport)
	}{
		{name: "released", end: func(l *DeclareLock, _ *memory.Transport) { l.Unlock(context.Background()) }},
		{name: "holder gone", end: func(_ *DeclareLock, tr *memory.Transport) { _ = tr.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mb := memory.NewBroker()
			a, atr := declareBroker(t, mb)
			b, _ := declareBroker(t, mb)
			held, err := LockDeclare(context.Background(), a, "orders")
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := lockWithin(ctx, b, "orders")
			select {
			case err := <-done:
				t.Fatalf("LockDeclare returned %v while another connection held the lease", err)
			case <-time.After(100 * time.Millisecond):
			}
			tc.end(held, atr)
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("LockDeclare did not get the lease within 5s of its holder ending")
			}
		})
	}
}

// A wait that outlasts ctx fails naming the queue and the lease, with
// ctx's error; an error other than the lease being held fails at once.
// Neither carries acemq's prefix, which the root package adds.
func TestLockDeclareFails(t *testing.T) {
	t.Parallel()
	t.Run("ctx ends", func(t *testing.T) {
		t.Parallel()
		mb := memory.NewBroker()
		a, _ := declareBroker(t, mb)
		b, _ := declareBroker(t, mb)
		held, err := LockDeclare(context.Background(), a, "orders")
		require.NoError(t, err)
		defer held.Unlock(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		start := time.Now()
		l, err := LockDeclare(ctx, b, "orders")
		require.Error(t, err)
		assert.Nil(t, l)
		assert.Less(t, time.Since(start), 2*time.Second, "it gives up when ctx ends")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), `the lease "orders.declare", which another connection holds while it declares the partitions of "orders"`)
		assert.False(t, strings.Contains(err.Error(), "acemq:"), err.Error())
	})
	t.Run("not held", func(t *testing.T) {
		t.Parallel()
		b, _ := declareBroker(t, memory.NewBroker())
		// The memory broker refuses lease names in the amq. prefix.
		l, err := LockDeclare(context.Background(), b, "amq.orders")
		require.Error(t, err)
		assert.Nil(t, l)
		assert.False(t, errors.Is(err, transport.ErrLocked), err.Error())
		assert.Contains(t, err.Error(), `taking the lease "amq.orders.declare" to declare the partitions of "amq.orders"`)
	})
}

// Without a Leaser nothing is held: every caller proceeds at once.
func TestLockDeclareWithoutLeases(t *testing.T) {
	t.Parallel()
	tr := noLeases{memory.New(t.Name())}
	t.Cleanup(func() { _ = tr.Close() })
	b := Broker{T: tr}
	first, err := LockDeclare(context.Background(), b, "orders")
	require.NoError(t, err)
	second, err := LockDeclare(context.Background(), b, "orders")
	require.NoError(t, err, "nothing is held, so nothing is waited for")
	first.Unlock(context.Background())
	second.Unlock(context.Background())
}

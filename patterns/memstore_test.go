package patterns_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq/patterns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type call struct {
		op   string // claim, complete, release, sleep
		d    time.Duration
		want patterns.ClaimResult
	}
	for _, tc := range []struct {
		name  string
		calls []call
	}{
		{"a claim holds the key", []call{{op: "claim", d: time.Minute, want: patterns.Claimed}, {op: "claim", d: time.Minute, want: patterns.InProgress}}},
		{"a completed key is a duplicate", []call{{op: "claim", d: time.Minute, want: patterns.Claimed}, {op: "complete", d: time.Minute}, {op: "claim", d: time.Minute, want: patterns.Duplicate}}},
		{"a released key is free", []call{{op: "claim", d: time.Minute, want: patterns.Claimed}, {op: "release"}, {op: "claim", d: time.Minute, want: patterns.Claimed}}},
		{"a release does not forget a completed key", []call{{op: "claim", d: time.Minute, want: patterns.Claimed}, {op: "complete", d: time.Minute}, {op: "release"}, {op: "claim", d: time.Minute, want: patterns.Duplicate}}},
		{"a lease runs out", []call{{op: "claim", d: 10 * time.Millisecond, want: patterns.Claimed}, {op: "sleep", d: 20 * time.Millisecond}, {op: "claim", d: time.Minute, want: patterns.Claimed}}},
		{"a kept key runs out", []call{{op: "claim", d: time.Minute, want: patterns.Claimed}, {op: "complete", d: 10 * time.Millisecond}, {op: "sleep", d: 20 * time.Millisecond}, {op: "claim", d: time.Minute, want: patterns.Claimed}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := patterns.NewMemoryStore()
			for i, c := range tc.calls {
				switch c.op {
				case "claim":
					got, err := s.Claim(ctx, "k", c.d)
					require.NoError(t, err)
					assert.Equal(t, c.want, got, "call %d", i)
				case "complete":
					require.NoError(t, s.Complete(ctx, "k", c.d))
				case "release":
					require.NoError(t, s.Release(ctx, "k"))
				case "sleep":
					time.Sleep(c.d)
				}
			}
		})
	}
}

func TestMemoryStoreOneClaimWins(t *testing.T) {
	t.Parallel()
	s := patterns.NewMemoryStore()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results = map[patterns.ClaimResult]int{}
	)
	for range 64 {
		wg.Go(func() {
			r, err := s.Claim(context.Background(), "k", time.Minute)
			assert.NoError(t, err)
			mu.Lock()
			results[r]++
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Equal(t, map[patterns.ClaimResult]int{patterns.Claimed: 1, patterns.InProgress: 63}, results)
}

func TestMemoryStoreSweepsExpiredKeys(t *testing.T) {
	t.Parallel()
	s := patterns.NewMemoryStore()
	ctx := context.Background()
	for i := range 200 {
		_, err := s.Claim(ctx, fmt.Sprint("old-", i), time.Millisecond)
		require.NoError(t, err)
	}
	time.Sleep(5 * time.Millisecond)
	for i := range 200 {
		_, err := s.Claim(ctx, fmt.Sprint("new-", i), time.Minute)
		require.NoError(t, err)
	}
	assert.Less(t, s.Len(), 300, "claims swept expired keys as they went")
	assert.GreaterOrEqual(t, s.Len(), 200, "live keys stay")
}

func TestMemoryStoreHonoursCtx(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := patterns.NewMemoryStore()
	_, err := s.Claim(ctx, "k", time.Minute)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, s.Complete(ctx, "k", time.Minute), context.Canceled)
	assert.ErrorIs(t, s.Release(ctx, "k"), context.Canceled)
	assert.Equal(t, "claimed duplicate in progress", fmt.Sprint(patterns.Claimed, " ", patterns.Duplicate, " ", patterns.InProgress))
}

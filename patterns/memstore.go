package patterns

import (
	"context"
	"sync"
	"time"
)

// MemoryStore is an IdempotencyStore in this process's memory: claims and
// handled keys expire on their own, and nothing outlives the process or is
// shared with another one. Expired keys are swept a few at a time by the
// calls themselves, so there is no goroutine to stop. The zero value is not
// usable; make one with NewMemoryStore. It is safe for concurrent use.
type MemoryStore struct {
	mu   sync.Mutex
	keys map[string]memEntry
	now  func() time.Time
}

type memEntry struct {
	done  bool      // completed, not merely claimed
	until time.Time // when the lease or the keep runs out
}

// sweepBatch bounds how many keys one call looks at for expiry.
const sweepBatch = 32

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{keys: make(map[string]memEntry), now: time.Now}
}

// Claim takes key for lease unless it is held or handled; see
// IdempotencyStore.
func (s *MemoryStore) Claim(ctx context.Context, key string, lease time.Duration) (ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	if e, ok := s.keys[key]; ok && now.Before(e.until) {
		if e.done {
			return Duplicate, nil
		}
		return InProgress, nil
	}
	s.keys[key] = memEntry{until: now.Add(lease)}
	return Claimed, nil
}

// Complete marks key handled for keep.
func (s *MemoryStore) Complete(ctx context.Context, key string, keep time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[key] = memEntry{done: true, until: s.now().Add(keep)}
	return nil
}

// Release frees a claimed key; a handled key stays handled.
func (s *MemoryStore) Release(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.keys[key]; ok && !e.done {
		delete(s.keys, key)
	}
	return nil
}

// Len reports how many keys the store holds, claimed or handled, expired
// ones not yet swept included.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// sweepLocked drops expired keys among up to sweepBatch of them. Map
// iteration starts at a random place, so every key is eventually looked at.
func (s *MemoryStore) sweepLocked(now time.Time) {
	n := 0
	for k, e := range s.keys {
		if !now.Before(e.until) {
			delete(s.keys, k)
		}
		if n++; n >= sweepBatch {
			return
		}
	}
}

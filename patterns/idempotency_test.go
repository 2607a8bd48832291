package patterns_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// faultyStore fails the calls it is told to.
type faultyStore struct {
	*patterns.MemoryStore
	claimErr, completeErr error
}

func (s faultyStore) Claim(ctx context.Context, key string, lease time.Duration) (patterns.ClaimResult, error) {
	if s.claimErr != nil {
		return 0, s.claimErr
	}
	return s.MemoryStore.Claim(ctx, key, lease)
}

func (s faultyStore) Complete(ctx context.Context, key string, keep time.Duration) error {
	if s.completeErr != nil {
		return s.completeErr
	}
	return s.MemoryStore.Complete(ctx, key, keep)
}

func TestWithIdempotency(t *testing.T) {
	t.Parallel()
	errStore := errors.New("the database is away")
	const lease = 40 * time.Second
	type step struct {
		ack     string // what the handler answers: done, retry or panic
		wantRan bool
		want    string // the Ack kind the middleware returns
	}
	for _, tc := range []struct {
		name  string
		store func(*patterns.MemoryStore) patterns.IdempotencyStore
		opts  []patterns.IdempotencyOption
		env   func() *acemq.Envelope
		steps []step
	}{
		{name: "a duplicate is acked without the handler", steps: []step{
			{ack: "done", wantRan: true, want: "done"},
			{ack: "done", wantRan: false, want: "done"},
		}},
		{name: "a failure releases the claim", steps: []step{
			{ack: "retry", wantRan: true, want: "retry"},
			{ack: "done", wantRan: true, want: "done"},
			{ack: "done", wantRan: false, want: "done"},
		}},
		{name: "a panic releases the claim and goes on", steps: []step{
			{ack: "panic", wantRan: true, want: "panic"},
			{ack: "done", wantRan: true, want: "done"},
		}},
		{name: "a store that cannot claim is a retry", store: func(m *patterns.MemoryStore) patterns.IdempotencyStore {
			return faultyStore{MemoryStore: m, claimErr: errStore}
		}, steps: []step{{ack: "done", wantRan: false, want: "retry"}}},
		{name: "a store that cannot complete is a retry", store: func(m *patterns.MemoryStore) patterns.IdempotencyStore {
			return faultyStore{MemoryStore: m, completeErr: errStore}
		}, steps: []step{{ack: "done", wantRan: true, want: "retry"}}},
		{name: "a nil store is a retry", store: func(*patterns.MemoryStore) patterns.IdempotencyStore { return nil },
			steps: []step{{ack: "done", wantRan: false, want: "retry"}}},
		{name: "a key function", opts: []patterns.IdempotencyOption{patterns.IdempotencyKey(func(e *acemq.Envelope) string {
			return e.Headers["x-order"].(string)
		})}, env: func() *acemq.Envelope {
			return &acemq.Envelope{ID: newID(), Headers: map[string]any{"x-order": "A-1"}}
		}, steps: []step{
			{ack: "done", wantRan: true, want: "done"},
			{ack: "done", wantRan: false, want: "done"}, // another ID, the same order
		}},
		{name: "an empty key dead-letters", opts: []patterns.IdempotencyOption{patterns.IdempotencyKey(func(*acemq.Envelope) string { return "" })},
			steps: []step{{ack: "done", wantRan: false, want: "fatal"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mem := patterns.NewMemoryStore()
			var store patterns.IdempotencyStore = mem
			if tc.store != nil {
				store = tc.store(mem)
			}
			env := func() *acemq.Envelope { return &acemq.Envelope{ID: "m-1"} }
			if tc.env != nil {
				env = tc.env
			}
			for i, st := range tc.steps {
				ran := false
				h := patterns.Chain(func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
					ran = true
					switch st.ack {
					case "retry":
						return acemq.Retry(errors.New("busy"))
					case "panic":
						panic("boom")
					}
					return acemq.Done()
				}, patterns.WithIdempotency[OrderPlaced](store, append(tc.opts, patterns.IdempotencyLease(lease))...))
				got := func() (kind string) {
					defer func() {
						if r := recover(); r != nil {
							kind = "panic"
						}
					}()
					return h(context.Background(), &acemq.Message[OrderPlaced]{Envelope: env()}).String()
				}()
				assert.Equal(t, st.wantRan, ran, "step %d: handler ran", i)
				assert.Equal(t, st.want, got, "step %d", i)
			}
		})
	}
}

var idSeq atomic.Int64

// newID returns an ID no other message in the test has.
func newID() string { return fmt.Sprint("m-", idSeq.Add(1)) }

func TestWithIdempotencyInProgressRetriesAfterTheLease(t *testing.T) {
	t.Parallel()
	store := patterns.NewMemoryStore()
	res, err := store.Claim(context.Background(), "m-1", time.Minute)
	require.NoError(t, err)
	require.Equal(t, patterns.Claimed, res)
	ran := false
	h := patterns.Chain(func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		ran = true
		return acemq.Done()
	}, patterns.WithIdempotency[OrderPlaced](store, patterns.IdempotencyLease(7*time.Second)))
	ack := h(context.Background(), &acemq.Message[OrderPlaced]{Envelope: &acemq.Envelope{ID: "m-1"}})
	assert.False(t, ran)
	assert.Equal(t, "retry", ack.String())
	assert.Equal(t, 7*time.Second, ack.Delay())
	assert.ErrorContains(t, ack.Err(), `"m-1" is being handled elsewhere`)
}

// keepStore records the keep each Complete was given.
type keepStore struct {
	*patterns.MemoryStore
	keeps []time.Duration
}

func (s *keepStore) Complete(ctx context.Context, key string, keep time.Duration) error {
	s.keeps = append(s.keeps, keep)
	return s.MemoryStore.Complete(ctx, key, keep)
}

// The store remembers a handled key for IdempotencyKeep's time, or
// DefaultKeep's; a keep of zero or less is the default.
func TestWithIdempotencyKeep(t *testing.T) {
	t.Parallel()
	done := func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() }
	for _, tc := range []struct {
		opts []patterns.IdempotencyOption
		want time.Duration
	}{
		{nil, patterns.DefaultKeep},
		{[]patterns.IdempotencyOption{patterns.IdempotencyKeep(90 * time.Minute)}, 90 * time.Minute},
		{[]patterns.IdempotencyOption{patterns.IdempotencyKeep(0)}, patterns.DefaultKeep},
	} {
		store := &keepStore{MemoryStore: patterns.NewMemoryStore()}
		h := patterns.Chain(done, patterns.WithIdempotency[OrderPlaced](store, tc.opts...))
		ack := h(context.Background(), &acemq.Message[OrderPlaced]{Envelope: &acemq.Envelope{ID: newID()}})
		require.Equal(t, "done", ack.String())
		assert.Equal(t, []time.Duration{tc.want}, store.keeps)
	}
}

// Two workers take the two copies of one message at once: the handler runs
// once, and both copies end acked.
func TestWithIdempotencyUnderConcurrency(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			got, onSettled := newSettlements()
			c := connect(t, b.url(t), onSettled)
			q := queue(t, c, "idem", ".retry.200ms")
			var runs atomic.Int32
			h := patterns.Chain(func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
				runs.Add(1)
				time.Sleep(100 * time.Millisecond) // long enough for the twin to meet the claim
				return acemq.Done()
			}, patterns.WithIdempotency[OrderPlaced](patterns.NewMemoryStore(), patterns.IdempotencyLease(time.Second)))
			cons, err := acemq.NewConsumer(c, q, h, acemq.Concurrency(2),
				acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 10, Delays: []time.Duration{200 * time.Millisecond}}))
			require.NoError(t, err)
			run(t, cons)
			pub := acemq.NewPublisher[OrderPlaced](c, "", q)
			for _, r := range pub.SendAll(ctxT(t), []OrderPlaced{{OrderID: "A-1"}, {OrderID: "A-1"}}, acemq.MessageID("order-A-1")) {
				require.NoError(t, r.Err)
			}
			acked := 0
			for acked < 2 {
				s := got.next(t)
				switch s.Outcome {
				case acemq.OutcomeAcked:
					acked++
				case acemq.OutcomeRetried:
					assert.Contains(t, s.Reason, "being handled elsewhere")
				default:
					t.Fatalf("unexpected settlement %s: %s", s.Outcome, s.Reason)
				}
			}
			assert.Equal(t, int32(1), runs.Load(), "the handler ran once")
		})
	}
}

package acemq_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/require"
)

// The composition pairs of large payloads: claim checks with ordered keys,
// batches and the outbox, and blob streams with ordered keys. Every pair
// stores its objects in a store of its own, deletes each once its message
// is acked (DeleteOnDone) and ends with the store empty: nothing is left
// behind, and no object is deleted before its message is done.

// Bulky is a typed payload large enough to be claim-checked: Pad is
// padding(Key, N, size).
type Bulky struct {
	Key string `json:"key"`
	N   int    `json:"n"`
	Pad []byte `json:"pad"`
}

// padding is size bytes that only key and n give.
func padding(key string, n, size int) []byte {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", key, n))
	r := rand.NewChaCha8(sum)
	b := make([]byte, size)
	_, _ = r.Read(b)
	return b
}

// whole says whether b is Key and N's padding of its length, at least min
// bytes long.
func (b Bulky) whole(min int) bool {
	return len(b.Pad) >= min && bytes.Equal(b.Pad, padding(b.Key, b.N, len(b.Pad)))
}

// countingStore counts the Puts of a blob.Store: how many bodies were
// claim-checked or streamed.
type countingStore struct {
	blob.Store
	puts atomic.Int64
}

func (s *countingStore) Put(ctx context.Context, id string, r io.Reader, expires time.Time) (blob.Info, error) {
	info, err := s.Store.Put(ctx, id, r, expires)
	if err == nil {
		s.puts.Add(1)
	}
	return info, err
}

// objectStore is a store of the pair's own, in a directory that goes with
// the test.
func objectStore(t *testing.T) *countingStore {
	t.Helper()
	s, err := blob.Dir(t.TempDir())
	require.NoError(t, err)
	return &countingStore{Store: s}
}

// objects lists every object left in s.
func objects(t *testing.T, s blob.Store) []string {
	t.Helper()
	var ids []string
	for id, err := range s.Expired(ctxT(t), time.Now().Add(100*365*24*time.Hour)) {
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

// noObjectsLeft waits for the deletes after the last acks, then checks
// that the store is empty.
func noObjectsLeft(t *testing.T, s blob.Store) {
	t.Helper()
	within(t, 10*time.Second, "every acked message's object deleted", func() bool { return len(objects(t, s)) == 0 })
}

var _ = registerPair(pair{
	a: "ordered", b: "claim check",
	holds: "bodies over the threshold are stored and loaded back whole on an ordered consumer, one handler per key at a time, each key's numbers in order with none missing, a retry in place loading its body again; every object is deleted once its message is acked",
	run: func(t *testing.T, url string) {
		s := objectStore(t)
		q := orderedQueue(t, url, 2)
		c := connectURL(t, url, acemq.WithRetryPolicy(inPlace), blob.WithClaimCheck(s, 1000, blob.DeleteOnDone()))
		log := newOrderLog()
		var partial, retried atomic.Int64
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Bulky]) acemq.Ack {
			if !m.Payload.whole(4 << 10) {
				partial.Add(1)
			}
			done := log.start(Step{Key: m.Payload.Key, N: m.Payload.N})
			if m.Envelope.Attempt == 1 && m.Payload.N%4 == 0 {
				retried.Add(1)
				done(false)
				return acemq.Retry(errors.New("failing once"))
			}
			done(true)
			return acemq.Done()
		}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}), acemq.Concurrency(4))
		require.NoError(t, err)
		run(t, cons)
		p := acemq.NewPublisher[Bulky](c, q, "", acemq.KeyBy(func(b Bulky) string { return b.Key }))
		keys := []string{"a", "b", "c", "d"}
		for n := 1; n <= 10; n++ {
			for _, k := range keys {
				require.NoError(t, p.Send(ctxT(t), Bulky{Key: k, N: n, Pad: padding(k, n, 4<<10+n)}))
			}
		}
		within(t, 60*time.Second, "every message handled", func() bool { return log.handled() == 40 })
		log.checkInOrder(t, keys, 10)
		require.Zero(t, partial.Load(), "a body loaded partly, or another's")
		require.EqualValues(t, 40, s.puts.Load(), "every body was claim-checked")
		require.EqualValues(t, 8, retried.Load(), "the first attempts of 4 and 8 were retried in place, their bodies loaded again")
		noObjectsLeft(t, s)
		require.Empty(t, dead(t, c, q))
	},
})

// streamed is the metadata of a payload streamed on an ordered key.
type streamed struct {
	Key    string `json:"key"`
	N      int    `json:"n"`
	SHA256 string `json:"sha256"` // what the test expects the Reader to have checked
}

var _ = registerPair(pair{
	a: "ordered", b: "blob stream",
	holds: "payloads streamed through blob.Handle on ordered keys are read whole, their digests verified by the Reader and again by the handler, one handler per key at a time in each key's order; every object is deleted once its message is acked",
	run: func(t *testing.T, url string) {
		s := objectStore(t)
		q := orderedQueue(t, url, 2)
		c := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		log := newOrderLog()
		var mismatched atomic.Int64
		cons, err := acemq.NewConsumer(c, q, blob.Handle(s, func(_ context.Context, m *acemq.Message[streamed], body *blob.Reader) acemq.Ack {
			done := log.start(Step{Key: m.Payload.Key, N: m.Payload.N})
			h := sha256.New()
			if _, err := io.Copy(h, body); err != nil { // nil only once the Reader checked the digest
				done(false)
				return acemq.Retry(err)
			}
			if hex.EncodeToString(h.Sum(nil)) != m.Payload.SHA256 {
				mismatched.Add(1)
			}
			done(true)
			return acemq.Done()
		}, blob.DeleteOnDone()), acemq.Ordered(acemq.OrderPolicy{Partitions: 2}), acemq.Concurrency(4))
		require.NoError(t, err)
		run(t, cons)
		p := blob.NewPublisher[streamed](c, s, q, "")
		keys := []string{"a", "b", "c"}
		for n := 1; n <= 6; n++ {
			for _, k := range keys {
				size := 64<<10 + (n%3)*(blob.ChunkSize/2) // up to one and a half chunks
				body := padding(k, n, size)
				sum := sha256.Sum256(body)
				ref, err := p.Send(ctxT(t), streamed{Key: k, N: n, SHA256: hex.EncodeToString(sum[:])}, bytes.NewReader(body), acemq.Key(k))
				require.NoError(t, err)
				require.Equal(t, hex.EncodeToString(sum[:]), ref.SHA256)
			}
		}
		within(t, 60*time.Second, "every payload handled", func() bool { return log.handled() == 18 })
		log.checkInOrder(t, keys, 6)
		require.Zero(t, mismatched.Load(), "a handler read bytes whose digest was not its payload's")
		require.EqualValues(t, 18, s.puts.Load())
		noObjectsLeft(t, s)
		require.Empty(t, dead(t, c, q))
	},
})

var _ = registerPair(pair{
	a: "batch", b: "claim check",
	holds: "a batch consumer gets every claim-checked body loaded whole, each message once, small and large mixed in one batch; every object is deleted once its message is acked",
	run: func(t *testing.T, url string) {
		s := objectStore(t)
		q := consumerQueue(t, url, acemq.RetryPolicy{})
		c := connectURL(t, url, blob.WithClaimCheck(s, 1000, blob.DeleteOnDone()))
		var mu sync.Mutex
		handled := map[int]int{}
		var partial, batches atomic.Int64
		cons, err := acemq.NewBatchConsumer(c, q, func(_ context.Context, batch []*acemq.Message[Bulky]) []acemq.Ack {
			batches.Add(1)
			mu.Lock()
			defer mu.Unlock()
			for _, m := range batch {
				if !m.Payload.whole(100) {
					partial.Add(1)
				}
				handled[m.Payload.N]++
			}
			return nil
		}, acemq.BatchSize(10), acemq.BatchWait(50*time.Millisecond))
		require.NoError(t, err)
		run(t, cons)
		msgs := make([]Bulky, 25)
		large := 0
		for i := range msgs {
			size := 100 // travels as it is
			if i%5 != 0 {
				size, large = 2<<10+i, large+1 // claim-checked
			}
			msgs[i] = Bulky{Key: "batch", N: i, Pad: padding("batch", i, size)}
		}
		for _, r := range acemq.NewPublisher[Bulky](c, "", q).SendAll(ctxT(t), msgs) {
			require.NoError(t, r.Err)
		}
		within(t, 30*time.Second, "all 25 handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == 25
		})
		mu.Lock()
		for n, k := range handled {
			require.Equal(t, 1, k, "message %d handled once", n)
		}
		mu.Unlock()
		require.Zero(t, partial.Load(), "a body loaded partly, or another's")
		require.EqualValues(t, large, s.puts.Load(), "only the bodies over the threshold were stored")
		require.Less(t, batches.Load(), int64(25), "messages came in batches")
		noObjectsLeft(t, s)
		require.Empty(t, dead(t, c, q))
	},
})

var _ = registerPair(pair{
	a: "outbox", b: "claim check",
	holds: "a large message sent through the outbox is claim-checked when written (the row holds the claim, not the body), the relay publishes the claim, and the consumer gets the body whole; a rolled-back write leaves only an orphan object, which expiry and Sweep remove; every acked message's object is deleted",
	run: func(t *testing.T, url string) {
		s := objectStore(t)
		ob, _ := sagaOn(t)
		q := consumerQueue(t, url, acemq.RetryPolicy{})
		c := connectURL(t, url, blob.WithClaimCheck(s, 1000, blob.DeleteOnDone(), blob.Expiry(time.Hour)))
		got := make(chan Bulky, 8)
		cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Bulky]) acemq.Ack {
			got <- m.Payload
			return acemq.Done()
		})
		require.NoError(t, err)
		run(t, cons)
		pub := outbox.NewPublisher[Bulky](ob, c, "", q)
		send := func(n int, commit bool) {
			tx, err := ob.DB().BeginTx(ctxT(t), nil)
			require.NoError(t, err)
			require.NoError(t, pub.Send(ctxT(t), tx, Bulky{Key: "ob", N: n, Pad: padding("ob", n, 64<<10)}))
			if commit {
				require.NoError(t, tx.Commit())
			} else {
				require.NoError(t, tx.Rollback())
			}
		}
		send(1, true)
		send(2, false)
		send(3, true)
		require.EqualValues(t, 3, s.puts.Load(), "each body was stored when written")
		var largest int
		require.NoError(t, ob.DB().QueryRowContext(ctxT(t), "SELECT COALESCE(MAX(LENGTH(body)), 0) FROM "+outbox.DefaultTable).Scan(&largest))
		require.Less(t, largest, 1000, "the rows hold claims, not 64 KiB bodies")

		ctx, cancel := context.WithCancel(context.Background())
		relayed := make(chan struct{})
		go func() {
			defer close(relayed)
			_ = outbox.NewRelay(ob, c, outbox.PollInterval(10*time.Millisecond)).Run(ctx)
		}()
		defer func() { cancel(); <-relayed }()
		for _, want := range []int{1, 3} {
			select {
			case b := <-got:
				require.Equal(t, want, b.N)
				require.True(t, b.whole(64<<10), "message %d arrived whole", b.N)
			case <-time.After(30 * time.Second):
				t.Fatalf("message %d not handled", want)
			}
		}
		within(t, 10*time.Second, "the acked messages' objects deleted", func() bool { return len(objects(t, s)) == 1 })
		// The rolled-back message's object is an orphan: Sweep removes it
		// once it expires.
		n, err := blob.Sweep(ctxT(t), s, time.Now().Add(2*time.Hour))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		noObjectsLeft(t, s)
		select {
		case b := <-got:
			t.Fatalf("the rolled-back message %d was delivered", b.N)
		case <-time.After(100 * time.Millisecond):
		}
	},
})

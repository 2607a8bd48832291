package blob_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/stretchr/testify/require"
)

// TestManyPayloadsWithRetries: 200 payloads of 1-20 MiB (under -short,
// 20 of 1-5 MiB), 8 handlers, every fifth failing once mid-read: each is
// handled whole, its digest checked, after a retry that reads it from its
// first byte again, and nothing is left in the store.
func TestManyPayloadsWithRetries(t *testing.T) {
	count := scaled(t, 200, 20)
	spread := scaled[int64](t, 19<<20, 4<<20)
	for _, pl := range manyPlaces {
		{
			b, sk := pl.broker, pl.store
			t.Run(b.name+"/"+sk.name, func(t *testing.T) {
				url, s := b.url(t), sk.new(t)
				c := connect(t, url)
				q := queue(t, url, "blob-many")
				sizes := make([]int64, count)
				rng := rand.New(rand.NewPCG(1, 2))
				for i := range sizes {
					sizes[i] = 1<<20 + rng.Int64N(spread)
				}
				var (
					mu       sync.Mutex
					failed   = map[uint64]bool{}
					whole    = map[uint64]string{}
					attempts = map[uint64][]int{}
				)
				done := make(chan struct{}, count)
				// Payloads wait in memory (the Memory store) until handled:
				// at most window of them at once.
				const window = 16
				slots := make(chan struct{}, window)
				run(t, c, q, blob.Handle(s, func(ctx context.Context, m *acemq.Message[meta], body *blob.Reader) acemq.Ack {
					seed := m.Payload.Seed
					mu.Lock()
					attempts[seed] = append(attempts[seed], m.Envelope.Attempt)
					failOnce := seed%5 == 0 && !failed[seed]
					failed[seed] = true
					mu.Unlock()
					if failOnce {
						if _, err := io.CopyN(io.Discard, body, sizes[seed]/2); err != nil {
							return acemq.Retry(err)
						}
						return acemq.Retry(errors.New("failing once, mid-read"))
					}
					n, d, err := readAll(body)
					if !errors.Is(err, io.EOF) || n != sizes[seed] {
						return acemq.Retry(fmt.Errorf("read %d of %d: %w", n, sizes[seed], err))
					}
					mu.Lock()
					whole[seed] = d
					mu.Unlock()
					done <- struct{}{}
					return acemq.Done()
				}, blob.DeleteOnDone()), acemq.Concurrency(8))
				p := blob.NewPublisher[meta](c, s, "", q)
				sent := make(chan error, count)
				var wg sync.WaitGroup
				for i := range count {
					slots <- struct{}{}
					wg.Go(func() {
						_, err := p.Send(t.Context(), meta{Seed: uint64(i)}, payload(uint64(i), sizes[i]))
						sent <- err
					})
					go func() { <-done; <-slots }()
				}
				wg.Wait()
				close(sent)
				for err := range sent {
					require.NoError(t, err)
				}
				deadline := time.After(3 * time.Minute)
				for {
					mu.Lock()
					n := len(whole)
					mu.Unlock()
					if n == count {
						break
					}
					select {
					case <-deadline:
						t.Fatalf("%d of %d handled whole", n, count)
					case <-time.After(20 * time.Millisecond):
					}
				}
				mu.Lock()
				defer mu.Unlock()
				for i := range count {
					seed := uint64(i)
					require.Equal(t, digest(t, seed, sizes[i]), whole[seed], "payload %d", i)
					if seed%5 == 0 {
						require.Equal(t, []int{1, 2}, attempts[seed], "payload %d failed once, then was read whole", i)
					} else {
						require.Equal(t, []int{1}, attempts[seed], "payload %d", i)
					}
				}
				require.Eventually(t, func() bool { return len(ids(t, s)) == 0 }, 10*time.Second, 20*time.Millisecond, "DeleteOnDone deletes every object once acked")
			})
		}
	}
}

// tamper is a store whose objects read back altered, as a disk or a
// bucket might return them.
type tamper struct {
	blob.Store
	mode string
}

func (s tamper) Open(ctx context.Context, id string, offset int64) (io.ReadCloser, error) {
	rc, err := s.Store.Open(ctx, id, offset)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil {
		return nil, err
	}
	switch s.mode {
	case "truncated":
		b = b[:len(b)-1]
	case "extended":
		b = append(b, 'x')
	case "altered":
		b[len(b)/2] ^= 1
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// TestCorruptObjectIsDeadLettered: an object read back shorter, longer or
// altered fails the Read with ErrCorrupt, and the message goes to .dlq
// with that reason whatever the handler asked (but Done), at once.
func TestCorruptObjectIsDeadLettered(t *testing.T) {
	for _, b := range brokers {
		for _, mode := range []string{"truncated", "extended", "altered"} {
			t.Run(b.name+"/"+mode, func(t *testing.T) {
				url := b.url(t)
				st, hook := newSettlements()
				c := connect(t, url, hook)
				q := queue(t, url, "blob-corrupt")
				s := blob.Memory()
				readErr := make(chan error, 1)
				run(t, c, q, blob.Handle(tamper{s, mode}, func(ctx context.Context, m *acemq.Message[meta], body *blob.Reader) acemq.Ack {
					_, _, err := readAll(body)
					readErr <- err
					return acemq.Retry(err)
				}))
				ref, err := blob.NewPublisher[meta](c, s, "", q).Send(t.Context(), meta{}, payload(3, 3<<20+5))
				require.NoError(t, err)
				require.ErrorIs(t, <-readErr, blob.ErrCorrupt)
				got := st.next(t, 10*time.Second)
				require.Equal(t, acemq.OutcomeDeadLettered, got.Outcome)
				require.Equal(t, 1, got.Attempt, "no retry: a corrupt object does not mend")
				require.Contains(t, got.Reason, blob.ErrCorrupt.Error())
				require.Contains(t, got.Reason, ref.ID)
				requireIn(t, c, acemq.DeadLetterQueue(q), 1)
			})
		}
	}
}

// TestGoneObjectIsDeadLettered: an expired object, or one the consumer's
// store does not hold, sends the message to .dlq with a reason naming the
// object and its expiry, without running the handler.
func TestGoneObjectIsDeadLettered(t *testing.T) {
	for _, b := range brokers {
		for _, tc := range []struct{ name, want string }{{"expired", "expired at"}, {"another store", "deleted or is in another store"}} {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				url := b.url(t)
				st, hook := newSettlements()
				c := connect(t, url, hook)
				q := queue(t, url, "blob-gone")
				s, other := blob.Memory(), blob.Memory()
				opts := []blob.Option{}
				if tc.name == "expired" {
					opts = append(opts, blob.Expiry(50*time.Millisecond))
				}
				require.NoError(t, c.Declare(t.Context(), acemq.Queue{Name: q}))
				ref, err := blob.NewPublisher[meta](c, s, "", q, opts...).Send(t.Context(), meta{}, payload(4, 1000))
				require.NoError(t, err)
				time.Sleep(100 * time.Millisecond)
				use := s
				if tc.name == "another store" {
					use = other
				}
				var ran atomic.Bool
				run(t, c, q, blob.Handle(use, func(context.Context, *acemq.Message[meta], *blob.Reader) acemq.Ack {
					ran.Store(true)
					return acemq.Done()
				}))
				got := st.next(t, 10*time.Second)
				require.Equal(t, acemq.OutcomeDeadLettered, got.Outcome)
				require.Contains(t, got.Reason, ref.ID)
				require.Contains(t, got.Reason, ref.Expires.UTC().Format(time.RFC3339))
				require.Contains(t, got.Reason, tc.want)
				require.False(t, ran.Load())
			})
		}
	}
}

// TestHandleBadSetup: a nil store or a message without a Ref is
// dead-lettered with the reason, never acked.
func TestHandleBadSetup(t *testing.T) {
	url := "memory://"
	st, hook := newSettlements()
	c := connect(t, url, hook)
	q1, q2 := queue(t, url, "blob-nil"), queue(t, url, "blob-noref")
	run(t, c, q1, blob.Handle[meta](nil, func(context.Context, *acemq.Message[meta], *blob.Reader) acemq.Ack { return acemq.Done() }))
	run(t, c, q2, blob.Handle(blob.Memory(), func(context.Context, *acemq.Message[meta], *blob.Reader) acemq.Ack { return acemq.Done() }))
	_, err := blob.NewPublisher[meta](c, blob.Memory(), "", q1).Send(t.Context(), meta{}, payload(1, 10))
	require.NoError(t, err)
	got := st.next(t, 10*time.Second)
	require.Equal(t, acemq.OutcomeDeadLettered, got.Outcome)
	require.Contains(t, got.Reason, "blob: Handle was given a nil Store")
	require.NoError(t, acemq.NewPublisher[blob.Envelope[meta]](c, "", q2).Send(t.Context(), blob.Envelope[meta]{}))
	got = st.next(t, 10*time.Second)
	require.Equal(t, acemq.OutcomeDeadLettered, got.Outcome)
	require.Contains(t, got.Reason, "names no object")
}

// TestDeleteOnDone: the object is deleted once its message is acked, and
// kept when it is not.
func TestDeleteOnDone(t *testing.T) {
	url := "memory://"
	st, hook := newSettlements()
	c := connect(t, url, hook)
	q := queue(t, url, "blob-delete")
	s := blob.Memory()
	run(t, c, q, blob.Handle(s, func(_ context.Context, m *acemq.Message[meta], body *blob.Reader) acemq.Ack {
		if m.Payload.Name == "reject" {
			return acemq.Reject(errors.New("no"))
		}
		return acemq.Done()
	}, blob.DeleteOnDone()))
	p := blob.NewPublisher[meta](c, s, "", q)
	kept, err := p.Send(t.Context(), meta{Name: "reject"}, payload(1, 10))
	require.NoError(t, err)
	require.Equal(t, acemq.OutcomeRejected, st.next(t, 10*time.Second).Outcome)
	_, err = p.Send(t.Context(), meta{Name: "done"}, payload(2, 10))
	require.NoError(t, err)
	require.Equal(t, acemq.OutcomeAcked, st.next(t, 10*time.Second).Outcome)
	require.Eventually(t, func() bool { return len(ids(t, s)) == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{kept.ID}, ids(t, s))
}

// TestReaderSeek: reads in any order still end with the digest checked.
func TestReaderSeek(t *testing.T) {
	url := "memory://"
	c := connect(t, url)
	q := queue(t, url, "blob-seek")
	s := blob.Memory()
	const size = 3*blob.ChunkSize + 100
	want, err := io.ReadAll(payload(9, size))
	require.NoError(t, err)
	type result struct {
		tail, head []byte
		end        error
		pastEnd    error
	}
	out := make(chan result, 1)
	run(t, c, q, blob.Handle(s, func(_ context.Context, _ *acemq.Message[meta], body *blob.Reader) acemq.Ack {
		var r result
		_, r.pastEnd = body.Seek(1, io.SeekEnd)
		if _, err := body.Seek(-200, io.SeekEnd); err != nil {
			return acemq.Reject(err)
		}
		r.tail = make([]byte, 200)
		if _, err := io.ReadFull(body, r.tail); err != nil {
			return acemq.Reject(err)
		}
		if _, err := body.Seek(0, io.SeekStart); err != nil {
			return acemq.Reject(err)
		}
		r.head = make([]byte, 1000)
		if _, err := io.ReadFull(body, r.head); err != nil {
			return acemq.Reject(err)
		}
		if _, err := body.Seek(0, io.SeekEnd); err != nil {
			return acemq.Reject(err)
		}
		_, r.end = body.Read(make([]byte, 10))
		out <- r
		return acemq.Done()
	}))
	_, err = blob.NewPublisher[meta](c, s, "", q).Send(t.Context(), meta{}, bytes.NewReader(want))
	require.NoError(t, err)
	r := <-out
	require.Error(t, r.pastEnd)
	require.Equal(t, want[size-200:], r.tail)
	require.Equal(t, want[:1000], r.head)
	require.ErrorIs(t, r.end, io.EOF, "the bytes never read were read to check the digest")
}

// requireIn waits for n messages ready in queue q.
func requireIn(t *testing.T, c *acemq.Conn, q string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		got, err := queueDepth(t.Context(), c, q)
		return err == nil && got == n
	}, 10*time.Second, 20*time.Millisecond, "queue %s", q)
}

var _ iter.Seq[int]

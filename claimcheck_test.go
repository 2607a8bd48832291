package acemq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/stretchr/testify/require"
)

// TestMaxMessageSize: an over-size body is refused at Send, SendAll,
// Prepare and PublishRaw, with both sizes and a pointer to blob, and
// nothing reaches the queue.
func TestMaxMessageSize(t *testing.T) {
	ctx := t.Context()
	c := connect(t)
	q := acemqtest.QueueName(t, "max-size")
	require.NoError(t, c.Declare(ctx, acemq.Queue{Name: q}))
	big := acemq.Raw(bytes.Repeat([]byte{'x'}, 17<<20))
	p := acemq.NewPublisher[acemq.Raw](c, "", q)
	check := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, acemq.ErrTooLarge)
		require.Contains(t, err.Error(), fmt.Sprint(17<<20, " bytes"))
		require.Contains(t, err.Error(), fmt.Sprint(16<<20))
		require.Contains(t, err.Error(), "package blob")
	}
	check(p.Send(ctx, big))
	res := p.SendAll(ctx, []acemq.Raw{acemq.Raw("ok"), big})
	require.NoError(t, res[0].Err)
	check(res[1].Err)
	_, err := p.Prepare(ctx, big)
	check(err)
	check(c.PublishRaw(ctx, acemq.RawMessage{RoutingKey: q, Envelope: &acemq.Envelope{ID: "x", Version: 1, Attempt: 1}, Body: big}))
	info, err := c.Transport().Inspect(ctx, q)
	require.NoError(t, err)
	require.Equal(t, 1, info.Messages, "only the small one")

	// A limit of one's own; the body at the limit passes.
	small := connect(t, acemq.WithMaxMessageSize(100))
	sp := acemq.NewPublisher[acemq.Raw](small, "", q)
	require.NoError(t, small.Declare(ctx, acemq.Queue{Name: q}))
	require.NoError(t, sp.Send(ctx, bytes.Repeat([]byte{'x'}, 100)))
	err = sp.Send(ctx, bytes.Repeat([]byte{'x'}, 101))
	require.ErrorIs(t, err, acemq.ErrTooLarge)
	require.Contains(t, err.Error(), "101 bytes, over this Conn's limit of 100")
}

func TestBodyStoreOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  acemq.ConnOption
		want string
	}{
		{"nil store", acemq.WithBodyStore(nil, 0), "acemq: WithBodyStore was given a nil store"},
		{"negative threshold", acemq.WithBodyStore(newMapStore(), -1), "acemq: WithBodyStore was given the threshold -1"},
		{"max size 0", acemq.WithMaxMessageSize(0), "acemq: WithMaxMessageSize was given 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := acemq.Connect(t.Context(), acemqtest.Memory(t), tc.opt)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// mapStore is a BodyStore in a map: claims are keys.
type mapStore struct {
	mu     sync.Mutex
	bodies map[string][]byte
	types  map[string]string
	fail   error
	limits []int // what BodyLimit said in each Load
}

func newMapStore() *mapStore {
	return &mapStore{bodies: map[string][]byte{}, types: map[string]string{}}
}

func (s *mapStore) Offload(_ context.Context, env *acemq.Envelope, ct string, body []byte) ([]byte, error) {
	if s.fail != nil {
		return nil, s.fail
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bodies[env.ID], s.types[env.ID] = bytes.Clone(body), ct
	return []byte(env.ID), nil
}

func (s *mapStore) Load(ctx context.Context, claim []byte) (string, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit, ok := acemq.BodyLimit(ctx)
	if !ok {
		return "", nil, errors.New("no limit in the ctx")
	}
	s.limits = append(s.limits, limit)
	if string(claim) == "fatal" {
		return "", nil, acemq.Fatal(errors.New("the body is corrupt"))
	}
	b, ok := s.bodies[string(claim)]
	if !ok {
		return "", nil, fmt.Errorf("no body %q", claim)
	}
	return s.types[string(claim)], b, nil
}

// TestBodyStoreSeam: a body over the threshold is offloaded after the
// codec and before the size guard, and loaded back before the decode; one
// at the threshold travels; a failed offload fails the Send; a claim that
// does not load is parked with the store's reason, one whose error is
// marked Fatal goes to .dlq at once; Load sees the consumer's MaxBodySize
// in BodyLimit, and a loaded body over it is parked.
func TestBodyStoreSeam(t *testing.T) {
	ctx := t.Context()
	store := newMapStore()
	st, hook := newSettlements()
	url := acemqtest.Memory(t)
	c := connectURL(t, url, acemq.WithBodyStore(store, 100), acemq.WithMaxMessageSize(1000), hook)
	q := acemqtest.QueueName(t, "seam")
	got := make(chan OrderPlaced, 4)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		got <- m.Payload
		return acemq.Done()
	})
	require.NoError(t, err)
	runConsumer(t, cons)
	p := acemq.NewPublisher[OrderPlaced](c, "", q)
	big := OrderPlaced{OrderID: strings.Repeat("o", 5000)} // over the size limit, but offloaded
	require.NoError(t, p.Send(ctx, big))
	require.Equal(t, big, <-got)
	require.Len(t, store.bodies, 1)
	// {"orderId":"...","totalCents":0} is 31 bytes around the ID.
	atLimit := OrderPlaced{OrderID: strings.Repeat("o", 100-31)}
	require.NoError(t, p.Send(ctx, atLimit))
	require.Equal(t, atLimit, <-got)
	require.Len(t, store.bodies, 1, "a body at the threshold travels as it is")
	for range 2 {
		require.Equal(t, acemq.OutcomeAcked, st.next(t).Outcome)
	}

	store.fail = errors.New("disk full")
	err = p.Send(ctx, big)
	require.ErrorContains(t, err, "disk full")
	require.ErrorContains(t, err, "acemq: storing the 5029-byte body")
	store.fail = nil

	require.NoError(t, c.PublishRaw(ctx, acemq.RawMessage{RoutingKey: q, Envelope: &acemq.Envelope{ID: "lost", Type: "OrderPlaced", Version: 1, Attempt: 1},
		Body: []byte("nowhere"), ContentType: acemq.ClaimCheckContentType}))
	s := st.next(t)
	require.Equal(t, acemq.OutcomeParked, s.Outcome)
	require.Contains(t, s.Reason, `no body "nowhere"`)

	require.NoError(t, c.PublishRaw(ctx, acemq.RawMessage{RoutingKey: q, Envelope: &acemq.Envelope{ID: "fatal", Type: "OrderPlaced", Version: 1, Attempt: 1},
		Body: []byte("fatal"), ContentType: acemq.ClaimCheckContentType}))
	s = st.next(t)
	require.Equal(t, acemq.OutcomeDeadLettered, s.Outcome)
	require.Equal(t, 1, s.Attempt)
	require.Contains(t, s.Reason, "the body is corrupt")
	require.Equal(t, acemq.DefaultMaxBodySize, store.limits[len(store.limits)-1])

	small := acemqtest.QueueName(t, "seam-small")
	cons, err = acemq.NewConsumer(c, small, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		got <- m.Payload
		return acemq.Done()
	}, acemq.MaxBodySize(1000))
	require.NoError(t, err)
	runConsumer(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", small).Send(ctx, big))
	s = st.next(t)
	require.Equal(t, acemq.OutcomeParked, s.Outcome)
	require.Contains(t, s.Reason, "the claim-checked body is 5029 bytes, over the limit of 1000 (MaxBodySize)")
	require.Equal(t, 1000, store.limits[len(store.limits)-1])
}

func runConsumer[T any](t *testing.T, c *acemq.Consumer[T]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// countingHandler counts the log records whose message has a prefix.
type countingHandler struct {
	slog.Handler
	prefixes []string
	n        *atomic.Int64
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	for _, p := range h.prefixes {
		if strings.HasPrefix(r.Message, p) {
			h.n.Add(1)
		}
	}
	return nil
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }

// TestMaxMessageSizeOnRabbitMQ: one 17 MiB Send among 1,000 good ones, all
// at once on one Conn: the big one is refused, the 1,000 are confirmed,
// and the transport never saw its publishing channel closed nor its
// connection lost (its log says so whenever either happens).
func TestMaxMessageSizeOnRabbitMQ(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	var closures atomic.Int64
	log := slog.New(countingHandler{Handler: slog.DiscardHandler, n: &closures, prefixes: []string{
		"acemq: rabbitmq closed the publishing channel",
		"acemq: rabbitmq connection lost",
		"acemq: rabbitmq reconnected",
		"acemq: rabbitmq nacked a publish",
	}})
	c := connectURL(t, url, acemq.WithLogger(log))
	q := acemqtest.QueueName(t, "max-size")
	acemqtest.DeleteQueuesAfter(t, url, q)
	require.NoError(t, c.Declare(t.Context(), acemq.Queue{Name: q}))
	p := acemq.NewPublisher[acemq.Raw](c, "", q)
	big := acemq.Raw(bytes.Repeat([]byte{'x'}, 17<<20))
	var (
		wg        sync.WaitGroup
		confirmed atomic.Int64
		bigErr    error
	)
	for i := range 1001 {
		wg.Go(func() {
			if i == 500 {
				bigErr = p.Send(t.Context(), big)
				return
			}
			if err := p.Send(t.Context(), acemq.Raw(fmt.Sprint("good ", i))); err == nil {
				confirmed.Add(1)
			}
		})
	}
	wg.Wait()
	require.ErrorIs(t, bigErr, acemq.ErrTooLarge)
	require.Equal(t, int64(1000), confirmed.Load())
	require.Zero(t, closures.Load(), "channel closures, reconnects or nacks")
	require.Eventually(t, func() bool {
		info, err := c.Transport().Inspect(t.Context(), q)
		return err == nil && info.Messages == 1000
	}, 10*time.Second, 50*time.Millisecond)
	require.NoError(t, c.Health(t.Context()))
}

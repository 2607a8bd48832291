package hardtest_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

// TestShutdownUnderLoad cancels Run while eight handlers are busy and the
// broker has handed out a full prefetch of 256: nothing is lost (every
// published ID was handled or is back in the queue), nothing is acked that
// no handler handled, nothing is both; then Close leaves no goroutine
// behind.
func TestShutdownUnderLoad(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const (
		n           = 1000
		concurrency = 8
		prefetch    = 256
	)
	q := queue(t, url, "shutdown")
	producer := dialRaw(t, url)
	defer producer.conn.Close()

	var (
		mu      sync.Mutex
		handled = map[string]bool{}
		acked   = map[string]bool{}
	)
	busy, release := make(chan struct{}, n), make(chan struct{})
	c, err := acemq.Connect(ctxT(t), url, acemq.WithLogger(quiet), acemq.OnSettled(func(_ context.Context, s acemq.Settlement) {
		mu.Lock()
		defer mu.Unlock()
		if s.Outcome == acemq.OutcomeAcked {
			acked[s.Envelope.ID] = true
		}
	}))
	require.NoError(t, err)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Order]) acemq.Ack {
		busy <- struct{}{}
		<-release
		mu.Lock()
		handled[m.Envelope.ID] = true
		mu.Unlock()
		return acemq.Done()
	}, acemq.Concurrency(concurrency), acemq.Prefetch(prefetch))
	require.NoError(t, err)
	producer.flood(q, 0, n, []byte(`{"id":"load"}`))

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(ctx) }()
	for range concurrency {
		<-busy
	}
	waitFor(t, "the broker hands out a full prefetch", func() bool { return producer.count(q) == n-prefetch })

	cancel()       // stop while all eight are busy and 248 wait in the buffer
	close(release) // the busy ones finish; the buffered ones go back
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(wait):
		t.Fatal("Run did not return")
	}
	require.NoError(t, c.Close())

	left := map[string]bool{}
	for producer.count(q) > 0 {
		d := producer.get(q)
		require.False(t, left[d.MessageId], "%s is in the queue twice", d.MessageId)
		left[d.MessageId] = true
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("handled %d, back in the queue %d, of %d", len(handled), len(left), n)
	assert.GreaterOrEqual(t, len(handled), concurrency, "the busy handlers finished")
	assert.Equal(t, handled, acked, "acked exactly what was handled")
	for i := range n {
		id := strconv.Itoa(i)
		switch {
		case handled[id] && left[id]:
			t.Errorf("%s was handled and is still in the queue", id)
		case !handled[id] && !left[id]:
			t.Errorf("%s was lost", id)
		}
	}
}

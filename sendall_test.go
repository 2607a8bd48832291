package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
)

// chainCounter counts the publish chains that ran, and records how many
// had run when the transport was first asked to publish.
type chainCounter struct {
	ran         atomic.Int64
	atFirstSend atomic.Int64
	sent        atomic.Bool
}

func (c *chainCounter) interceptor() acemq.PublishInterceptor {
	return func(context.Context, *acemq.PublishContext) error {
		c.ran.Add(1)
		return nil
	}
}

func (c *chainCounter) publishing() {
	if c.sent.CompareAndSwap(false, true) {
		c.atFirstSend.Store(c.ran.Load())
	}
}

// plainTransport is a transport without PublishBatch: SendAll calls
// Publish from a pool of goroutines.
type plainTransport struct {
	transport.Transport
	counter *chainCounter
}

func (p plainTransport) Publish(ctx context.Context, m transport.Message) error {
	p.counter.publishing()
	return p.Transport.Publish(ctx, m)
}

// batchTransport has PublishBatch.
type batchTransport struct {
	plainTransport
}

func (b batchTransport) PublishBatch(ctx context.Context, ms []transport.Message) []error {
	b.counter.publishing()
	return b.Transport.(transport.BatchPublisher).PublishBatch(ctx, ms)
}

// TestSendAllRunsTheWholeChainFirst (SPEC §4, seed 001): whatever the
// batch's size, the chain for every payload has run before the transport
// is asked to publish any, with and without PublishBatch; the results are
// in payload order.
func TestSendAllRunsTheWholeChainFirst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		batch bool
		n     int
	}{
		{"PublishBatch, 3", true, 3},
		{"PublishBatch, 1000", true, 1000},
		{"Publish from goroutines, 1000", false, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			counter := &chainCounter{}
			plain := plainTransport{Transport: memory.NewBroker().Connect(), counter: counter}
			var tr transport.Transport = plain
			if tc.batch {
				tr = batchTransport{plain}
			}
			c := connect(t, acemq.WithTransport(tr), acemq.WithPublishInterceptor(counter.interceptor()))
			q := declareQueue(t, c)
			vs := make([]OrderPlaced, tc.n)
			for i := range vs {
				vs[i].OrderID = fmt.Sprint(i)
			}
			results := acemq.NewPublisher[OrderPlaced](c, "", q).SendAll(ctxT(t), vs, acemq.Header("x-batch", "1"))
			require.Len(t, results, tc.n)
			for i, r := range results {
				require.NoError(t, r.Err, "payload %d", i)
			}
			assert.EqualValues(t, tc.n, counter.atFirstSend.Load(), "chains run when the first publish began")
			ids := make(map[string]string, tc.n)
			for range tc.n {
				d := take(t, c, q)
				ids[d.MessageID] = string(d.Body)
			}
			for i, r := range results {
				assert.JSONEq(t, fmt.Sprintf(`{"orderId":"%d","totalCents":0}`, i), ids[r.ID], "result %d is payload %d's", i, i)
			}
		})
	}
}

// TestSendAllRunsTheChainsConcurrently: every payload's chain runs on a
// goroutine of its own, so interceptors that wait for one another all
// proceed, however many payloads there are (more than the 256 goroutines
// an earlier build used). A refusal is the interceptor's very error, in
// its payload's place.
func TestSendAllRunsTheChainsConcurrently(t *testing.T) {
	t.Parallel()
	const n = 300
	refused := errors.New("not this one")
	var (
		entered sync.WaitGroup
		all     = make(chan struct{})
	)
	entered.Add(n)
	go func() { entered.Wait(); close(all) }()
	c := connect(t, acemq.WithPublishInterceptor(func(ctx context.Context, pc *acemq.PublishContext) error {
		entered.Done()
		select {
		case <-all:
		case <-ctx.Done():
			return ctx.Err()
		}
		if pc.Payload.(OrderPlaced).OrderID == "7" {
			return refused
		}
		return nil
	}))
	q := declareQueue(t, c)
	vs := make([]OrderPlaced, n)
	for i := range vs {
		vs[i].OrderID = fmt.Sprint(i)
	}
	results := acemq.NewPublisher[OrderPlaced](c, "", q).SendAll(ctxT(t), vs)
	for i, r := range results {
		if i == 7 {
			assert.Equal(t, refused, r.Err, "the interceptor's very error")
			continue
		}
		assert.NoError(t, r.Err, "payload %d", i)
	}
	info, err := c.Transport().Inspect(ctxT(t), q)
	require.NoError(t, err)
	assert.Equal(t, n-1, info.Messages)
}

package patterns_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Quote is what the pricing service answers.
type Quote struct {
	OrderID string `json:"orderId"`
	Cents   int64  `json:"cents"`
}

// replies records what the responder's publish chain saw.
type replies struct {
	mu           sync.Mutex
	correlations map[string]string // reply's CorrelationID -> its payload's OrderID
}

func (r *replies) interceptor() acemq.PublishInterceptor {
	return func(_ context.Context, c *acemq.PublishContext) error {
		if q, ok := c.Payload.(Quote); ok {
			r.mu.Lock()
			r.correlations[c.Envelope.CorrelationID] = q.OrderID
			r.mu.Unlock()
		}
		return nil
	}
}

// responder serves q on a Conn of its own, pricing each order at twice its
// total, or answering with a body that is not a Quote for order "junk".
func responder(t *testing.T, url, q string) *replies {
	t.Helper()
	rec := &replies{correlations: map[string]string{}}
	c := connect(t, url, acemq.WithPublishInterceptor(rec.interceptor()))
	cons, err := acemq.NewConsumer(c, q, func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		if m.Envelope.ReplyTo == "" {
			return acemq.Reject(errors.New("no ReplyTo"))
		}
		if m.Payload.OrderID == "junk" {
			return acemq.AckOf(patterns.Reply(ctx, c, m.Envelope, "not a quote"))
		}
		return acemq.AckOf(patterns.Reply(ctx, c, m.Envelope, Quote{OrderID: m.Payload.OrderID, Cents: 2 * m.Payload.TotalCents}))
	}, acemq.Concurrency(4))
	require.NoError(t, err)
	run(t, cons)
	return rec
}

func TestRequestReply(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			url := b.url(t)
			var stamped sync.Map
			c := connect(t, url, acemq.WithPublishInterceptor(func(_ context.Context, pc *acemq.PublishContext) error {
				stamped.Store(pc.Envelope.ID, true)
				return nil
			}))
			q := queue(t, c, "pricing", defaultTiers...)
			rec := responder(t, url, q)

			var wg sync.WaitGroup
			for i := range 10 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					id := fmt.Sprint("A-", i)
					got, err := patterns.Request[OrderPlaced, Quote](ctx, c, "", q, OrderPlaced{OrderID: id, TotalCents: int64(i)})
					if assert.NoError(t, err, id) {
						assert.Equal(t, Quote{OrderID: id, Cents: int64(2 * i)}, got, "each request gets its own reply")
					}
				})
			}
			wg.Wait()
			n := 0
			stamped.Range(func(any, any) bool { n++; return true })
			assert.Equal(t, 10, n, "the requests ran the publish chain")
			rec.mu.Lock()
			defer rec.mu.Unlock()
			assert.Len(t, rec.correlations, 10, "the replies ran the publish chain")
			for corr := range rec.correlations {
				_, ok := stamped.Load(corr)
				assert.True(t, ok, "reply correlated %q to a request's ID", corr)
			}
		})
	}
}

func TestRequestFailures(t *testing.T) {
	t.Parallel()
	errRefused := errors.New("requests to pricing are closed")
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			url := b.url(t)
			c := connect(t, url, acemq.WithPublishInterceptor(func(_ context.Context, pc *acemq.PublishContext) error {
				if o, ok := pc.Payload.(OrderPlaced); ok && o.OrderID == "refused" {
					return errRefused
				}
				return nil
			}))
			served, silent := queue(t, c, "served", defaultTiers...), queue(t, c, "silent")
			responder(t, url, served)
			for _, tc := range []struct {
				name    string
				queue   string
				order   string
				timeout time.Duration
				is      error
				text    string
			}{
				{name: "no reply before the deadline", queue: silent, order: "A-1", timeout: 100 * time.Millisecond,
					is: context.DeadlineExceeded, text: "got no reply"},
				{name: "no queue takes it", queue: silent + ".nobody", order: "A-1", timeout: 5 * time.Second,
					is: acemq.ErrUnroutable},
				{name: "an interceptor refuses it", queue: served, order: "refused", timeout: 5 * time.Second, is: errRefused},
				{name: "the reply does not decode", queue: served, order: "junk", timeout: 5 * time.Second,
					text: "does not decode into *patterns_test.Quote"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
					defer cancel()
					_, err := patterns.Request[OrderPlaced, Quote](ctx, c, "", tc.queue, OrderPlaced{OrderID: tc.order})
					require.Error(t, err)
					if tc.is != nil {
						assert.ErrorIs(t, err, tc.is)
					}
					if tc.is == errRefused {
						assert.Equal(t, errRefused, err, "a refusal comes back as it is")
					}
					assert.Contains(t, err.Error(), tc.text)
				})
			}
		})
	}
}

func TestReplyRefusesBadInput(t *testing.T) {
	t.Parallel()
	c := connect(t, "memory://")
	for _, tc := range []struct {
		name string
		c    *acemq.Conn
		env  *acemq.Envelope
		want string
	}{
		{"nil Conn", nil, &acemq.Envelope{ID: "m-1", ReplyTo: "x"}, "patterns: Reply was given a nil Conn"},
		{"nil envelope", c, nil, "patterns: Reply was given a nil envelope"},
		{"no ReplyTo", c, &acemq.Envelope{ID: "m-1"}, "patterns: message m-1 asked for no reply (its ReplyTo is empty)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := patterns.Reply(ctxT(t), tc.c, tc.env, Quote{})
			assert.EqualError(t, err, tc.want)
		})
	}
	_, err := patterns.Request[OrderPlaced, Quote](ctxT(t), nil, "", "q", OrderPlaced{})
	assert.ErrorContains(t, err, "nil Conn")
}

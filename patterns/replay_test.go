package patterns_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// seed puts n dead letters on q: attempt 5, an error, a trace context and
// an x-n header numbering them from 0.
func seed(t *testing.T, c *acemq.Conn, q string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprint("dead-", i)
		env := &acemq.Envelope{
			ID: ids[i], Type: "OrderPlaced", Version: 1, Attempt: 5, FirstSeen: time.Now().UTC(),
			Error:   "gave up after 5 attempts: the warehouse is busy",
			Headers: map[string]any{"traceparent": traceparent, "x-n": int32(i), "x-tenant": "alpha"},
		}
		require.NoError(t, c.PublishRaw(ctxT(t), acemq.RawMessage{RoutingKey: q, Envelope: env,
			Body: []byte(fmt.Sprintf(`{"orderId":"A-%d"}`, i)), ContentType: "application/json"}))
	}
	return ids
}

// drain takes every message off q, acking it, and returns their envelopes.
func drain(t *testing.T, c *acemq.Conn, q string) []*acemq.Envelope {
	t.Helper()
	var out []*acemq.Envelope
	for {
		d, ok, err := c.Transport().Get(ctxT(t), q)
		require.NoError(t, err)
		if !ok {
			return out
		}
		require.NoError(t, d.Ack())
		env, err := acemq.EnvelopeOf(d.Message)
		require.NoError(t, err)
		out = append(out, env)
	}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	even := func(e *acemq.Envelope) bool { n, _ := e.Headers["x-n"].(int32); return n%2 == 0 }
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			url := b.url(t)
			for _, tc := range []struct {
				name      string
				opts      []patterns.ReplayOption
				want      patterns.ReplayReport
				wantMoved []string
				wantLeft  []string
				minTime   time.Duration
			}{
				{name: "everything", want: patterns.ReplayReport{Moved: 6},
					wantMoved: []string{"dead-0", "dead-1", "dead-2", "dead-3", "dead-4", "dead-5"}},
				{name: "a filter puts the others back in order", opts: []patterns.ReplayOption{patterns.Filter(even)},
					want:      patterns.ReplayReport{Moved: 3, Skipped: 3},
					wantMoved: []string{"dead-0", "dead-2", "dead-4"}, wantLeft: []string{"dead-1", "dead-3", "dead-5"}},
				{name: "a limit", opts: []patterns.ReplayOption{patterns.Limit(2)}, want: patterns.ReplayReport{Moved: 2},
					wantMoved: []string{"dead-0", "dead-1"}, wantLeft: []string{"dead-2", "dead-3", "dead-4", "dead-5"}},
				{name: "a rate", opts: []patterns.ReplayOption{patterns.Rate(50)}, want: patterns.ReplayReport{Moved: 6},
					wantMoved: []string{"dead-0", "dead-1", "dead-2", "dead-3", "dead-4", "dead-5"}, minTime: 90 * time.Millisecond},
			} {
				t.Run(tc.name, func(t *testing.T) {
					c := connect(t, url)
					dlq, work := queue(t, c, "dlq"), queue(t, c, "work")
					seed(t, c, dlq, 6)
					start := time.Now()
					rep, err := patterns.Replay(ctxT(t), c, dlq, work, tc.opts...)
					require.NoError(t, err)
					assert.Equal(t, tc.want, rep)
					assert.GreaterOrEqual(t, time.Since(start), tc.minTime)

					moved := drain(t, c, work)
					var ids []string
					for _, env := range moved {
						ids = append(ids, env.ID)
						assert.Equal(t, 1, env.Attempt, "attempt reset")
						assert.Empty(t, env.Error, "error cleared")
						assert.Equal(t, traceparent, env.Headers["traceparent"], "trace context kept")
						assert.Equal(t, "alpha", env.Headers["x-tenant"], "headers kept")
					}
					assert.Equal(t, tc.wantMoved, ids)
					eventually(t, "the skipped messages to be back", func() bool { return count(t, c, dlq) == len(tc.wantLeft) })
					var left []string
					for _, env := range drain(t, c, dlq) {
						left = append(left, env.ID)
						assert.Equal(t, 5, env.Attempt, "what stays is untouched")
					}
					assert.Equal(t, tc.wantLeft, left)
				})
			}
		})
	}
}

// A replay interrupted half way loses nothing: what left the source is in
// the target, once.
func TestReplayInterrupted(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		for _, tc := range []struct {
			name string
			stop func(cancel context.CancelFunc) []patterns.ReplayOption
		}{
			{"between two messages", func(cancel context.CancelFunc) []patterns.ReplayOption {
				var seen atomic.Int32
				return []patterns.ReplayOption{patterns.Filter(func(*acemq.Envelope) bool {
					if seen.Add(1) == 50 {
						cancel()
					}
					return true
				})}
			}},
			{"while pacing", func(cancel context.CancelFunc) []patterns.ReplayOption {
				time.AfterFunc(50*time.Millisecond, cancel)
				return []patterns.ReplayOption{patterns.Rate(1000)}
			}},
		} {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				c := connect(t, b.url(t))
				dlq, work := queue(t, c, "dlq"), queue(t, c, "work")
				seed(t, c, dlq, 200)
				ctx, cancel := context.WithCancel(ctxT(t))
				defer cancel()
				rep, err := patterns.Replay(ctx, c, dlq, work, tc.stop(cancel)...)
				require.ErrorIs(t, err, context.Canceled)
				assert.Positive(t, rep.Moved)
				assert.Less(t, rep.Moved, 200, "interrupted")
				eventually(t, "the queues to add up", func() bool { return count(t, c, dlq)+count(t, c, work) == 200 })
				assert.Equal(t, rep.Moved, count(t, c, work))
			})
		}
	}
}

func TestReplayHoldsWhatItCannotMove(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			c := connect(t, b.url(t))
			dlq, work := queue(t, c, "parked"), queue(t, c, "work")
			seed(t, c, dlq, 1)
			require.NoError(t, c.Transport().Publish(ctxT(t), transport.Message{RoutingKey: dlq, MessageID: "damaged",
				Headers: map[string]any{"x-acemq-attempt": "abc"}, Body: []byte("{}"), ContentType: "application/json"}))
			seed(t, c, dlq, 1)
			rep, err := patterns.Replay(ctxT(t), c, dlq, work)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "1 messages could not be moved")
			assert.Contains(t, err.Error(), "x-acemq-attempt")
			assert.Equal(t, patterns.ReplayReport{Moved: 2, Failed: 1}, rep)
			eventually(t, "the damaged message to be back", func() bool { return count(t, c, dlq) == 1 })
			assert.Equal(t, 2, count(t, c, work))
		})
	}
}

func TestReplayRefusesBadInput(t *testing.T) {
	t.Parallel()
	c := connect(t, "memory://")
	q := queue(t, c, "q")
	for _, tc := range []struct {
		name     string
		c        *acemq.Conn
		from, to string
		want     string
		is       error
	}{
		{name: "nil Conn", from: q, to: "x", want: "patterns: Replay was given a nil Conn"},
		{name: "no source", c: c, to: q, want: `patterns: replay from "" to "` + q + `": both queues must be named`},
		{name: "to itself", c: c, from: q, to: q, want: `patterns: replay from "` + q + `" to itself would never end`},
		// The transport's error is the cause, as the transport wrote it.
		{name: "no such target", c: c, from: q, to: q + ".missing", want: `patterns: replay to "` + q + `.missing": memory: inspect: no queue named "` + q + `.missing"`, is: transport.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := patterns.Replay(ctxT(t), tc.c, tc.from, tc.to)
			assert.EqualError(t, err, tc.want)
			if tc.is != nil {
				assert.True(t, errors.Is(err, tc.is), "%v is %v", err, tc.is)
			}
		})
	}
}

func TestReplayProgress(t *testing.T) {
	t.Parallel()
	c := connect(t, brokers[0].url(t))
	dlq, work := queue(t, c, "dlq"), queue(t, c, "work")
	seed(t, c, dlq, 4)
	var seen []patterns.ReplayReport
	odd := func(e *acemq.Envelope) bool { n, _ := e.Headers["x-n"].(int32); return n%2 == 1 }
	rep, err := patterns.Replay(ctxT(t), c, dlq, work, patterns.Filter(odd),
		patterns.Progress(func(r patterns.ReplayReport) { seen = append(seen, r) }))
	require.NoError(t, err)
	assert.Equal(t, []patterns.ReplayReport{
		{Skipped: 1}, {Moved: 1, Skipped: 1}, {Moved: 1, Skipped: 2}, {Moved: 2, Skipped: 2},
	}, seen, "one call per message taken, with the counts so far")
	assert.Equal(t, seen[len(seen)-1], rep)
}

// A message a foreign producer sent with an AMQP decimal header moves like
// any other, the decimal kept.
func TestReplayMovesADecimal(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			c := connect(t, b.url(t))
			dlq, work := queue(t, c, "dlq"), queue(t, c, "work")
			price := amqp.Decimal{Scale: 2, Value: 1999}
			require.NoError(t, c.Transport().Publish(ctxT(t), transport.Message{
				RoutingKey: dlq, MessageID: "decimal-1", Body: []byte("{}"), ContentType: "application/json",
				Headers: map[string]any{"x-price": price},
			}))
			rep, err := patterns.Replay(ctxT(t), c, dlq, work)
			require.NoError(t, err)
			assert.Equal(t, patterns.ReplayReport{Moved: 1}, rep)
			moved := drain(t, c, work)
			require.Len(t, moved, 1)
			assert.Equal(t, "decimal-1", moved[0].ID)
			assert.Equal(t, price, moved[0].Headers["x-price"])
		})
	}
}

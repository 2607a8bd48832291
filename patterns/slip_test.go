package patterns_test

import (
	"context"
	"errors"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Trip is a document each step of a routing slip signs.
type Trip struct {
	Visited []string `json:"visited"`
}

// arrival is what a step saw.
type arrival struct {
	step  string
	env   *acemq.Envelope
	trip  Trip
	steps []string
}

// step consumes q as a step named name: it signs the trip, reports what it
// saw on seen and lets Forward pass the trip on.
func step(t *testing.T, c *acemq.Conn, name, q string, seen chan<- arrival) {
	t.Helper()
	h := patterns.Chain(func(_ context.Context, m *acemq.Message[Trip]) acemq.Ack {
		m.Payload.Visited = append(m.Payload.Visited, name)
		seen <- arrival{step: name, env: m.Envelope.Clone(), trip: m.Payload, steps: patterns.Steps(m.Envelope)}
		return acemq.Done()
	}, patterns.Forward[Trip](c))
	cons, err := acemq.NewConsumer(c, q, h)
	require.NoError(t, err)
	run(t, cons)
}

func TestRoutingSlipThreeSteps(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			got, onSettled := newSettlements()
			c := connect(t, b.url(t), onSettled)
			seen := make(chan arrival, 16)
			names := []string{"validate", "price", "ship"}
			queues := make([]string, len(names))
			for i, n := range names {
				queues[i] = queue(t, c, n, defaultTiers...)
				step(t, c, n, queues[i], seen)
			}
			pub := acemq.NewPublisher[Trip](c, "", queues[0])
			require.NoError(t, pub.Send(ctxT(t), Trip{}, patterns.Itinerary(queues[1:]...),
				acemq.CorrelationID("trip-1"), acemq.Header("x-tenant", "alpha")))

			var trail []arrival
			for range names {
				a := <-seen
				trail = append(trail, a)
				assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
			}
			for i, a := range trail {
				assert.Equal(t, names[i], a.step, "the steps run in the slip's order")
				assert.Equal(t, names[:i+1], a.trip.Visited, "each step gets the trip as the last one left it")
				assert.Equal(t, queues[i+1:], append([]string{}, a.steps...), "the slip advances")
				assert.Equal(t, "trip-1", a.env.CorrelationID)
				assert.Equal(t, "alpha", a.env.Headers["x-tenant"], "application headers travel")
				if i > 0 {
					assert.Equal(t, trail[i-1].env.ID, a.env.CausationID, "each hop is caused by the last")
					assert.NotEqual(t, trail[i-1].env.ID, a.env.ID)
				}
			}
			select {
			case a := <-seen:
				t.Fatalf("a step ran after the last one: %+v", a)
			default:
			}
		})
	}
}

// A step that runs twice forwards the same ID twice, so an idempotent next
// step can tell.
func TestRoutingSlipForwardIDIsStable(t *testing.T) {
	t.Parallel()
	c := connect(t, "memory://")
	first := queue(t, c, "first", defaultTiers...)
	next := queue(t, c, "next")
	seen := make(chan arrival, 4)
	step(t, c, "first", first, seen)
	pub := acemq.NewPublisher[Trip](c, "", first)
	for range 2 {
		require.NoError(t, pub.Send(ctxT(t), Trip{}, patterns.Itinerary(next), acemq.MessageID("trip-7")))
		<-seen
	}
	// The handler reports before Forward publishes: wait for both copies.
	eventually(t, "both forwards", func() bool { return count(t, c, next) == 2 })
	envs := drain(t, c, next)
	require.Len(t, envs, 2)
	assert.Equal(t, envs[0].ID, envs[1].ID)
	assert.NotEqual(t, "trip-7", envs[0].ID)
}

func TestRoutingSlipFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		send    func(t *testing.T, c *acemq.Conn, q string)
		outcome acemq.Outcome
		reason  string
	}{
		{"the next step does not exist", func(t *testing.T, c *acemq.Conn, q string) {
			require.NoError(t, acemq.NewPublisher[Trip](c, "", q).Send(ctxT(t), Trip{}, patterns.Itinerary(q+".gone")))
		}, acemq.OutcomeRetried, "forwarding message"},
		{"an empty step", func(t *testing.T, c *acemq.Conn, q string) {
			require.NoError(t, acemq.NewPublisher[Trip](c, "", q).Send(ctxT(t), Trip{}, patterns.Itinerary("", "x")))
		}, acemq.OutcomeRejected, "has an empty step"},
		{"an unreadable slip", func(t *testing.T, c *acemq.Conn, q string) {
			require.NoError(t, c.Transport().Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: "m-1",
				ContentType: "application/json", Body: []byte(`{}`), Headers: map[string]any{"x-acemq-itinerary": int32(3)}}))
		}, acemq.OutcomeRejected, "routing slip of message m-1 is unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, onSettled := newSettlements()
			c := connect(t, "memory://", onSettled)
			q := queue(t, c, "step", defaultTiers...)
			step(t, c, "step", q, make(chan arrival, 16))
			tc.send(t, c, q)
			s := got.next(t)
			assert.Equal(t, tc.outcome, s.Outcome)
			assert.Contains(t, s.Reason, tc.reason)
		})
	}
}

func TestForwardLeavesOtherAcksAlone(t *testing.T) {
	t.Parallel()
	errBusy := errors.New("busy")
	h := patterns.Chain(func(context.Context, *acemq.Message[Trip]) acemq.Ack { return acemq.Retry(errBusy) },
		patterns.Forward[Trip](nil))
	ack := h(context.Background(), &acemq.Message[Trip]{Envelope: &acemq.Envelope{ID: "m-1"}})
	assert.Equal(t, "retry", ack.String())
	assert.Equal(t, errBusy, ack.Err())
	done := patterns.Chain(func(context.Context, *acemq.Message[Trip]) acemq.Ack { return acemq.Done() },
		patterns.Forward[Trip](nil))
	assert.Equal(t, "done", done(context.Background(), &acemq.Message[Trip]{Envelope: &acemq.Envelope{ID: "m-1"}}).String(),
		"a message without a slip has arrived")
	assert.Nil(t, patterns.Steps(nil))
}

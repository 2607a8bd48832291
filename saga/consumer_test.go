package saga_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestThroughAConsumerOnMemory(t *testing.T) {
	t.Parallel()
	throughAConsumer(t, acemqtest.Memory(t), databases[0])
}

func TestThroughAConsumerOnRabbitMQ(t *testing.T) {
	t.Parallel()
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			throughAConsumer(t, acemqtest.RabbitMQ(t), d)
		})
	}
}

// throughAConsumer runs a saga behind a real consumer and relay: a placed
// order starts it, its step sends the next message to its own queue
// through the outbox, and that one completes it. A message for no instance
// ends in the dlq, one whose stored state does not decode in .parked.
func throughAConsumer(t *testing.T, url string, d database) {
	ctx := t.Context()
	queue := acemqtest.QueueName(t, "saga")
	acemqtest.DeleteQueuesAfter(t, url, queue)
	settled := make(chan acemq.Settlement, 64)
	mq := connect(t, url, acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { settled <- s }))
	f := newFixture[Checkout](t, d.open(t), d.dialect)
	self := outbox.NewPublisher[Event](f.ob, mq, "", queue)

	step := func(ctx context.Context, in *saga.Instance[Checkout], m *acemq.Message[Event]) error {
		in.State.Steps = append(in.State.Steps, m.Payload.Kind)
		switch m.Payload.Kind {
		case "placed":
			in.State.Status = "reserving"
			return self.Send(ctx, in.Tx, Event{Kind: "reserved"}, acemq.CorrelationID(in.ID), acemq.Key(in.ID))
		case "reserved":
			in.State.Status = "done"
			in.Complete()
		}
		return nil
	}
	starts := saga.Handle(f.saga, byCorrelationID[Event], step, saga.Starts())
	follows := saga.Handle(f.saga, byCorrelationID[Event], step)
	cons, err := acemq.NewConsumer(mq, queue, func(ctx context.Context, m *acemq.Message[Event]) acemq.Ack {
		if m.Payload.Kind == "placed" {
			return starts(ctx, m)
		}
		return follows(ctx, m)
	}, acemq.Concurrency(4))
	require.NoError(t, err)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- cons.Run(runCtx) }()
	go func() {
		done <- outbox.NewRelay(f.ob, mq, outbox.PollInterval(10*time.Millisecond), outbox.WithLogger(quiet)).Run(runCtx)
	}()
	defer func() {
		stop()
		for range 2 {
			require.NoError(t, <-done)
		}
	}()

	// A stored state this build cannot read.
	epoch := "0"
	if d.dialect == outbox.Postgres {
		epoch = "now()"
	}
	_, err = f.db.ExecContext(ctx, "INSERT INTO "+f.saga.TableName()+` (id, state, version, done, created_at, updated_at) VALUES ('o-bad', '{"status": 5}', 1, FALSE, `+epoch+`, `+epoch+`)`)
	require.NoError(t, err)

	pub := acemq.NewPublisher[Event](mq, "", queue)
	require.NoError(t, pub.Send(ctx, Event{Kind: "placed"}, acemq.CorrelationID("o-1"), acemq.MessageID("placed-1")))
	require.NoError(t, pub.Send(ctx, Event{Kind: "placed"}, acemq.CorrelationID("o-1"), acemq.MessageID("placed-1")))
	require.NoError(t, pub.Send(ctx, Event{Kind: "reserved"}, acemq.CorrelationID("o-none"), acemq.MessageID("stray-1")))
	require.NoError(t, pub.Send(ctx, Event{Kind: "reserved"}, acemq.CorrelationID("o-bad"), acemq.MessageID("bad-1")))

	byID := map[string][]acemq.Settlement{}
	deadline := time.After(20 * time.Second)
	for n := 0; n < 5; n++ { // placed twice, stray, bad, and the step's own "reserved"
		select {
		case s := <-settled:
			byID[s.Envelope.ID] = append(byID[s.Envelope.ID], s)
		case <-deadline:
			t.Fatalf("after 20s only these settled: %v", byID)
		}
	}
	require.Len(t, byID["placed-1"], 2)
	for _, s := range byID["placed-1"] {
		assert.Equal(t, acemq.OutcomeAcked, s.Outcome, "the original and its duplicate")
	}
	require.Len(t, byID["stray-1"], 1)
	assert.Equal(t, acemq.OutcomeRejected, byID["stray-1"][0].Outcome)
	assert.Equal(t, fmt.Sprintf(`the handler rejected it: no saga %q with correlation ID "o-none"`, f.saga.Name()), byID["stray-1"][0].Reason)
	require.Len(t, byID["bad-1"], 1)
	assert.Equal(t, acemq.OutcomeParked, byID["bad-1"][0].Outcome)
	assert.Contains(t, byID["bad-1"][0].Reason, fmt.Sprintf(`the handler parked it: the state of saga %q with correlation ID "o-bad" does not decode into saga_test.Checkout`, f.saga.Name()))

	var reserved []acemq.Settlement
	for id, ss := range byID {
		if id != "placed-1" && ss[0].Envelope.CorrelationID == "o-1" {
			reserved = append(reserved, ss...)
		}
	}
	require.Len(t, reserved, 1, "the step's own message, through the outbox")
	assert.Equal(t, acemq.OutcomeAcked, reserved[0].Outcome)
	assert.Equal(t, "o-1", reserved[0].Envelope.Key, "the ordering key travels through the outbox")

	snap, err := f.saga.Get(ctx, "o-1")
	require.NoError(t, err)
	assert.True(t, snap.Done)
	assert.Equal(t, "done", snap.State.Status)
	assert.Equal(t, []string{"placed", "reserved"}, snap.State.Steps)
	pending, err := f.ob.Pending(ctx)
	require.NoError(t, err)
	assert.Zero(t, pending)

	take := func(q string) *acemq.Envelope {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			d, ok, err := mq.Transport().Get(ctx, q)
			require.NoError(t, err)
			if ok {
				require.NoError(t, d.Ack())
				env, err := acemq.EnvelopeOf(d.Message)
				require.NoError(t, err)
				return env
			}
			require.True(t, time.Now().Before(deadline), "nothing on %s", q)
			time.Sleep(10 * time.Millisecond)
		}
	}
	assert.Equal(t, "stray-1", take(acemq.DeadLetterQueue(queue)).ID)
	assert.Equal(t, "bad-1", take(acemq.ParkingQueue(queue)).ID)
}

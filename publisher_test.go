package acemq_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSendUnroutable(t *testing.T) {
	t.Parallel()
	c := connect(t)
	err := acemq.NewPublisher[OrderPlaced](c, "", "nobody-listens").Send(ctxT(t), OrderPlaced{})
	require.ErrorIs(t, err, acemq.ErrUnroutable)
	assert.Contains(t, err.Error(), `"nobody-listens"`)
}

func TestSendHonoursAnEndedContext(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := declareQueue(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctx, OrderPlaced{})
	assert.ErrorIs(t, err, context.Canceled)
	empty(t, c, q)
}

func TestTheEnvelopeOnTheWire(t *testing.T) {
	t.Parallel()
	c := connect(t, acemq.WithOrigin("billing@host1"))
	q := declareQueue(t, c)
	before := time.Now().UTC().Truncate(time.Second)
	pub := acemq.NewPublisher[OrderPlaced](c, "", q, acemq.SchemaVersion(3))
	require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "9"}, acemq.Header("x-tenant", "alpha"), acemq.CorrelationID("c-1")))
	d := take(t, c, q)
	// Wire format v2: the envelope in the properties; a header only for a
	// version other than 1.
	assert.Len(t, d.MessageID, 36)
	assert.Equal(t, "7", d.MessageID[14:15], "a UUIDv7")
	assert.Equal(t, "OrderPlaced", d.Type)
	assert.Equal(t, "c-1", d.CorrelationID)
	assert.Equal(t, "billing@host1", d.AppID)
	assert.Equal(t, "application/json", d.ContentType)
	assert.False(t, d.Timestamp.Before(before))
	assert.Equal(t, map[string]any{"x-acemq-version": int32(3), "x-tenant": "alpha"}, d.Headers)
}

func TestHeaderValuesAreChecked(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := declareQueue(t, c)
	pub := acemq.NewPublisher[OrderPlaced](c, "", q)
	for _, tc := range []struct {
		name  string
		value any
		ok    bool
	}{
		{"string", "s", true},
		{"int", 1, true},
		{"nested", map[string]any{"a": []any{int64(1), "b", time.Now()}}, true},
		{"struct", struct{}{}, false},
		{"uint64", uint64(1), false},
		{"nested channel", map[string]any{"c": make(chan int)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := pub.Send(ctxT(t), OrderPlaced{}, acemq.Header("x-v", tc.value))
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), `acemq: header "x-v"`)
		})
	}
	t.Run("set by an interceptor", func(t *testing.T) {
		c := connect(t, acemq.WithPublishInterceptor(func(_ context.Context, p *acemq.PublishContext) error {
			p.SetHeader("x-bad", struct{}{})
			return nil
		}))
		q := declareQueue(t, c)
		err := acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), `"x-bad"`)
		empty(t, c, q)
	})
}

func TestRawSkipsTheCodec(t *testing.T) {
	t.Parallel()
	got, opt := newSettlements()
	c := connect(t, opt)
	q := acemqtestQueue(t)
	bodies := make(chan acemq.Raw, 2)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[acemq.Raw]) acemq.Ack {
		bodies <- m.Payload
		return acemq.Done()
	})
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[acemq.Raw](c, "", q).Send(ctxT(t), acemq.Raw{0xff, 0x00, 0x01}))
	require.NoError(t, acemq.NewPublisher[acemq.Raw](c, "", q, acemq.ContentType("text/x-weird")).Send(ctxT(t), acemq.Raw("plain")))
	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	assert.Equal(t, acemq.Raw{0xff, 0x00, 0x01}, <-bodies, "no codec on either side, and no parking for an unknown content type")
	assert.Equal(t, acemq.Raw("plain"), <-bodies)
}

func TestPrepareRunsTheChainWithoutSending(t *testing.T) {
	t.Parallel()
	errNo := errors.New("no")
	c := connect(t, acemq.WithPublishInterceptor(func(_ context.Context, p *acemq.PublishContext) error {
		if p.Payload.(OrderPlaced).OrderID == "refuse" {
			return errNo
		}
		p.SetHeader("x-stamped", true)
		return nil
	}))
	q := declareQueue(t, c)
	pub := acemq.NewPublisher[OrderPlaced](c, "", q)
	m, err := pub.Prepare(ctxT(t), OrderPlaced{OrderID: "1"})
	require.NoError(t, err)
	assert.Equal(t, true, m.Envelope.Headers["x-stamped"])
	assert.Equal(t, "application/json", m.ContentType)
	var o OrderPlaced
	require.NoError(t, json.Unmarshal(m.Body, &o))
	assert.Equal(t, "1", o.OrderID)
	empty(t, c, q)
	require.NoError(t, c.PublishRaw(ctxT(t), m))
	assert.Equal(t, m.Envelope.ID, take(t, c, q).MessageID)
	_, err = pub.Prepare(ctxT(t), OrderPlaced{OrderID: "refuse"})
	assert.True(t, err == errNo)
}

func TestPublishRawBypassesTheChain(t *testing.T) {
	t.Parallel()
	c := connect(t, acemq.WithPublishInterceptor(func(context.Context, *acemq.PublishContext) error {
		return errors.New("the chain ran")
	}))
	q := declareQueue(t, c)
	env := &acemq.Envelope{ID: "raw-1", Type: "Thing", Version: 1, Attempt: 2, FirstSeen: time.Now()}
	require.NoError(t, c.PublishRaw(ctxT(t), acemq.RawMessage{RoutingKey: q, Envelope: env, Body: []byte("{}"), ContentType: "application/json"}))
	d := take(t, c, q)
	assert.Equal(t, "raw-1", d.MessageID)
	assert.EqualValues(t, 2, d.Headers["x-acemq-attempt"])
}

func TestPublisherWithoutConnFailsCleanly(t *testing.T) {
	t.Parallel()
	pub := acemq.NewPublisher[OrderPlaced](nil, "", "q")
	err := pub.Send(context.Background(), OrderPlaced{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nil Conn")
	res := pub.SendAll(context.Background(), make([]OrderPlaced, 3))
	for _, r := range res {
		assert.Error(t, r.Err)
	}
}

func TestDefaultOriginIsExecutableAtHost(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := declareQueue(t, c)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	exe, err := os.Executable()
	require.NoError(t, err)
	host, err := os.Hostname()
	require.NoError(t, err)
	d := take(t, c, q)
	assert.Equal(t, filepath.Base(exe)+"@"+host, d.AppID)
}

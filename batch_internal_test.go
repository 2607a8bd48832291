package acemq

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type batchOrder struct {
	OrderID string `json:"orderId"`
}

// A batch consumer's route is a route like any other: served one delivery (as
// the batch mode serves a batch with one delivery left), it hands
// the handler a batch of one and judges its one Ack, or parks a body that
// does not decode without running the handler.
func TestBatchRouteServesABatchOfOne(t *testing.T) {
	c, err := Connect(context.Background(), "memory://", WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer c.Close()
	var got [][]string
	cons, err := NewBatchConsumer(c, "batch-of-one", func(_ context.Context, batch []*Message[batchOrder]) []Ack {
		ids := make([]string, len(batch))
		for i, m := range batch {
			ids[i] = m.Payload.OrderID
		}
		got = append(got, ids)
		return []Ack{Reject(errors.New("no"))}
	})
	require.NoError(t, err)
	e := cons.e
	r, reason := e.pick(typeName[batchOrder]())
	require.NotNil(t, r, reason)
	env := &Envelope{ID: "m-1", Version: 1, Attempt: 1, Headers: map[string]any{}}

	v, seconds := r.serve(context.Background(), e, transport.Delivery{Message: transport.Message{ContentType: "application/json", Body: []byte(`{"orderId":"A-1"}`)}}, env)
	assert.Equal(t, [][]string{{"A-1"}}, got)
	assert.Equal(t, OutcomeRejected, v.outcome)
	assert.Equal(t, "the handler rejected it: no", v.reason)
	assert.GreaterOrEqual(t, seconds, 0.0)

	v, seconds = r.serve(context.Background(), e, transport.Delivery{Message: transport.Message{ContentType: "application/json", Body: []byte(`{not json`)}}, env)
	assert.Len(t, got, 1, "the handler did not run")
	assert.Equal(t, OutcomeParked, v.outcome)
	assert.Negative(t, seconds)
}

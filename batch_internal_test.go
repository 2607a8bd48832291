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

// A batch of which one delivery is left after prepare (the other parked
// there, its envelope unreadable) goes to the batch handler like any other
// batch: the handler gets a batch of one and its one Ack is judged; a
// batch whose only delivery does not decode never reaches the handler.
func TestBatchOfOneGoesToTheBatchHandler(t *testing.T) {
	settled := make(chan Settlement, 8)
	c, err := Connect(context.Background(), "memory://", WithLogger(slog.New(slog.DiscardHandler)),
		OnSettled(func(_ context.Context, s Settlement) { settled <- s }))
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
	m := cons.e.mode.(*batchMode)
	delivery := func(id, body string, headers map[string]any) transport.Delivery {
		return transport.Delivery{Queue: "batch-of-one", Message: transport.Message{
			MessageID: id, Type: "batchOrder", ContentType: "application/json", Headers: headers, Body: []byte(body)}}
	}
	outcomes := func(n int) map[string]Outcome {
		out := make(map[string]Outcome)
		for range n {
			s := <-settled
			out[s.Envelope.ID] = s.Outcome
		}
		return out
	}

	m.processBatch(context.Background(), []transport.Delivery{
		delivery("m-1", `{"orderId":"A-1"}`, nil),
		delivery("m-2", `{"orderId":"A-2"}`, map[string]any{"x-acemq-attempt": "abc"}),
	})
	assert.Equal(t, [][]string{{"A-1"}}, got)
	assert.Equal(t, map[string]Outcome{"m-1": OutcomeRejected, "m-2": OutcomeParked}, outcomes(2))

	m.processBatch(context.Background(), []transport.Delivery{delivery("m-3", `{not json`, nil)})
	assert.Len(t, got, 1, "the handler did not run")
	assert.Equal(t, map[string]Outcome{"m-3": OutcomeParked}, outcomes(1))
}

package acemq_test

import (
	"context"
	"encoding/xml"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// xmlCodec is a second codec, as a team migrating off XML might register.
type xmlCodec struct{}

func (xmlCodec) ContentType() string             { return "application/xml" }
func (xmlCodec) Encode(v any) ([]byte, error)    { return xml.Marshal(v) }
func (xmlCodec) Decode(data []byte, v any) error { return xml.Unmarshal(data, v) }

func TestWithCodec(t *testing.T) {
	t.Parallel()
	url := acemqtest.Memory(t)
	got, opt := newSettlements()
	xmlConn := connectURL(t, url, acemq.WithCodec(xmlCodec{}), opt)
	jsonConn := connectURL(t, url) // the default codec
	q := acemqtestQueue(t)
	seen := make(chan OrderPlaced, 4)
	cons, err := acemq.NewConsumer(xmlConn, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		seen <- m.Payload
		return acemq.Done()
	})
	require.NoError(t, err)

	// The Conn publishes with its codec...
	m, err := acemq.NewPublisher[OrderPlaced](xmlConn, "", q).Prepare(ctxT(t), OrderPlaced{OrderID: "x-1", TotalCents: 5})
	require.NoError(t, err)
	assert.Equal(t, "application/xml", m.ContentType)
	assert.Contains(t, string(m.Body), "<OrderID>x-1</OrderID>")

	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](xmlConn, "", q).Send(ctxT(t), OrderPlaced{OrderID: "x-1", TotalCents: 5}))
	// ...and its consumers still read JSON, the default, beside it.
	require.NoError(t, acemq.NewPublisher[OrderPlaced](jsonConn, "", q).Send(ctxT(t), OrderPlaced{OrderID: "j-1", TotalCents: 7}))
	// A content type no codec of the Conn knows is parked, named.
	require.NoError(t, acemq.NewPublisher[acemq.Raw](jsonConn, "", q, acemq.ContentType("application/cbor")).Send(ctxT(t), acemq.Raw{0xa0}))

	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
	parked := got.next(t)
	assert.Equal(t, acemq.OutcomeParked, parked.Outcome)
	assert.Equal(t, `no codec for content type "application/cbor"`, parked.Reason)
	assert.Equal(t, OrderPlaced{OrderID: "x-1", TotalCents: 5}, <-seen)
	assert.Equal(t, OrderPlaced{OrderID: "j-1", TotalCents: 7}, <-seen)

	_, err = acemq.Connect(ctxT(t), "memory://", acemq.WithCodec(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "acemq: WithCodec")
}

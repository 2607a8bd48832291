package acemq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
)

// TestUnrenderableEnvelopesFailAtSend: whatever an interceptor leaves on the
// envelope that the wire cannot carry, or a consumer would not read back
// the same, fails that payload at Send with the reason, on both brokers,
// and nothing reaches the queue to be parked later.
func TestUnrenderableEnvelopesFailAtSend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(c *acemq.PublishContext)
		wants string
	}{
		{"Version 0", func(c *acemq.PublishContext) { c.Envelope.Version = 0 }, "the envelope's Version is 0, want 1 to"},
		{"Version negative", func(c *acemq.PublishContext) { c.Envelope.Version = -1 }, "the envelope's Version is -1"},
		{"an empty ID", func(c *acemq.PublishContext) { c.Envelope.ID = "" }, "the envelope has an empty ID"},
		{"a new envelope without an ID", func(c *acemq.PublishContext) { c.Envelope = &acemq.Envelope{} }, "the envelope has an empty ID"},
		{"a type too long for its property", func(c *acemq.PublishContext) { c.Envelope.Type = strings.Repeat("T", 256) },
			"the envelope's Type is 256 bytes, more than the 255 AMQP allows"},
		{"a value AMQP cannot carry", func(c *acemq.PublishContext) { c.SetHeader("x-when", struct{}{}) },
			`header "x-when": a struct {} cannot travel in an AMQP table`},
		{"a routing key too long", func(c *acemq.PublishContext) { c.RoutingKey = strings.Repeat("k", 300) },
			"the routing key is 300 bytes, more than the 255 AMQP allows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			onBrokers(t, func(t *testing.T, url string) {
				c := connectURL(t, url, acemq.WithPublishInterceptor(func(_ context.Context, pc *acemq.PublishContext) error {
					if p, ok := pc.Payload.(OrderPlaced); ok && p.OrderID == "bad" {
						tc.edit(pc)
					}
					return nil
				}))
				q := consumerQueue(t, url, acemq.RetryPolicy{})
				require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: q}))
				pub := acemq.NewPublisher[OrderPlaced](c, "", q)

				err := pub.Send(ctxT(t), OrderPlaced{OrderID: "bad"})
				require.Error(t, err)
				assert.True(t, strings.HasPrefix(err.Error(), "acemq: "), err.Error())
				assert.Contains(t, err.Error(), tc.wants)
				empty(t, c, q)

				// In a batch only that payload fails; the rest are sent.
				results := pub.SendAll(ctxT(t), []OrderPlaced{{OrderID: "1"}, {OrderID: "bad"}, {OrderID: "3"}})
				require.Len(t, results, 3)
				assert.NoError(t, results[0].Err)
				require.Error(t, results[1].Err)
				assert.Contains(t, results[1].Err.Error(), tc.wants)
				assert.NoError(t, results[2].Err)
				// Pipelined publishes promise no order.
				assert.ElementsMatch(t, []string{results[0].ID, results[2].ID}, []string{take(t, c, q).MessageID, take(t, c, q).MessageID})
				empty(t, c, q)
			})
		})
	}
}

// TestPublishRawChecksTheEnvelope: the engine's own path refuses what Send
// refuses, so a relay or a replay cannot put an unreadable message on a
// queue either.
func TestPublishRawChecksTheEnvelope(t *testing.T) {
	t.Parallel()
	c := connect(t)
	q := declareQueue(t, c)
	for _, tc := range []struct {
		name  string
		env   acemq.Envelope
		wants string
	}{
		{"Version 0", acemq.Envelope{ID: "a", Attempt: 1}, "Version is 0"},
		{"no ID", acemq.Envelope{Version: 1, Attempt: 1}, "empty ID"},
		{"Attempt 0", acemq.Envelope{ID: "a", Version: 1}, "Attempt is 0"},
		{"FirstSeen before 1970", acemq.Envelope{ID: "a", Version: 1, Attempt: 1, FirstSeen: time.Unix(-5, 0)}, "before 1970"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.PublishRaw(ctxT(t), acemq.RawMessage{RoutingKey: q, Envelope: &tc.env, Body: []byte("{}"), ContentType: "application/json"})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wants)
			empty(t, c, q)
		})
	}
}

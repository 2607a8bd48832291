package acemq_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostileInputIsParkedWithItsReason sends what a foreign or broken
// producer might, straight through the transport, and checks each message
// reaches the consume chain and is parked (or handled) with a reason naming
// the problem, while the consumer keeps running.
func TestHostileInputIsParkedWithItsReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		m       transport.Message
		outcome acemq.Outcome
		reason  string
	}{
		{"not JSON", transport.Message{ContentType: "application/json", Body: []byte("<xml/>")},
			acemq.OutcomeParked, "the body does not decode as application/json into OrderPlaced"},
		{"empty body", transport.Message{ContentType: "application/json"},
			acemq.OutcomeParked, "the body does not decode as application/json"},
		{"wrong content type", transport.Message{ContentType: "application/xml", Body: []byte("{}")},
			acemq.OutcomeParked, `no codec for content type "application/xml"`},
		{"missing content type decodes with the Conn's codec", transport.Message{Body: []byte("{}")},
			acemq.OutcomeAcked, ""},
		{"a charset parameter is still JSON", transport.Message{ContentType: "application/json; charset=utf-8", Body: []byte("{}")},
			acemq.OutcomeAcked, ""},
		{"upper case is still JSON", transport.Message{ContentType: "Application/JSON", Body: []byte("{}")},
			acemq.OutcomeAcked, ""},
		{"a parameter does not make XML JSON", transport.Message{ContentType: "application/xml; charset=utf-8", Body: []byte("{}")},
			acemq.OutcomeParked, `no codec for content type "application/xml; charset=utf-8"`},
		{"too big", transport.Message{ContentType: "application/json", Body: []byte(`{"orderId":"` + strings.Repeat("x", 200) + `"}`)},
			acemq.OutcomeParked, "the body is 214 bytes, over the limit of 128"},
		{"attempt as text", transport.Message{ContentType: "application/json", Body: []byte("{}"), Headers: map[string]any{"x-acemq-attempt": "abc"}},
			acemq.OutcomeParked, `the envelope is unreadable: header x-acemq-attempt is a string ("abc"), want an integer`},
		{"attempt negative", transport.Message{ContentType: "application/json", Body: []byte("{}"), Headers: map[string]any{"x-acemq-attempt": int32(-1)}},
			acemq.OutcomeParked, "the envelope is unreadable: header x-acemq-attempt is -1, want 1 to 1000000"},
		{"first seen unparseable", transport.Message{ContentType: "application/json", Body: []byte("{}"), Headers: map[string]any{"x-acemq-first-seen": "last tuesday"}},
			acemq.OutcomeParked, `the envelope is unreadable: header x-acemq-first-seen is "last tuesday", want an RFC 3339 time`},
		{"headers over MaxHeaderSize", transport.Message{ContentType: "application/json", Body: []byte("{}"), Headers: map[string]any{"x-blob": strings.Repeat("h", 200<<10)}},
			acemq.OutcomeParked, "the headers are 204816 bytes, over the limit of 131072 (MaxHeaderSize)"},
		{"many headers over MaxHeaderSize", transport.Message{ContentType: "application/json", Body: []byte("{}"), Headers: manyHeaders(100, 10<<10)},
			acemq.OutcomeParked, "the headers are "},
		{"foreign, no acemq headers", transport.Message{ContentType: "application/json", Body: []byte(`{"orderId":"f"}`), MessageID: "legacy-1"},
			acemq.OutcomeAcked, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, opt := newSettlements()
			var chainSaw atomic.Int32
			c := connect(t, opt, acemq.WithConsumeInterceptor(func(_ context.Context, cc *acemq.ConsumeContext) error {
				chainSaw.Add(1)
				return nil
			}))
			q := acemqtestQueue(t)
			cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
				if m.Envelope.Headers == nil {
					return acemq.Reject(nil)
				}
				return acemq.Done()
			}, acemq.MaxBodySize(128))
			require.NoError(t, err)
			run(t, cons)
			tc.m.RoutingKey = q
			require.NoError(t, c.Transport().Publish(ctxT(t), tc.m))
			s := got.next(t)
			assert.Equal(t, tc.outcome, s.Outcome)
			assert.True(t, strings.HasPrefix(s.Reason, tc.reason), "reason %q, want it to start with %q", s.Reason, tc.reason)
			assert.EqualValues(t, 1, chainSaw.Load(), "the consume chain saw it")
			if tc.outcome == acemq.OutcomeParked {
				p := take(t, c, acemq.ParkingQueue(q))
				assert.Equal(t, s.Reason, p.Headers["x-acemq-error"])
				assert.Equal(t, tc.m.Body, p.Body)
				for k, v := range tc.m.Headers {
					assert.Equal(t, v, p.Headers[k], "the damaged header %s is kept as evidence", k)
				}
			}
			// The consumer keeps running.
			require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
			assert.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
		})
	}
}

// manyHeaders is n headers of size bytes each.
func manyHeaders(n, size int) map[string]any {
	h := make(map[string]any, n)
	for i := range n {
		h[fmt.Sprintf("x-h%03d", i)] = strings.Repeat("v", size)
	}
	return h
}

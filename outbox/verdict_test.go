package outbox_test

import (
	"database/sql"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/transport"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// TestEveryPathGivesAHeaderTheSameVerdict runs the same header values
// through every path a message takes to the broker: Send on a Conn and a
// raw transport Publish, on the memory transport and on RabbitMQ, and the
// outbox's Send on SQLite and PostgreSQL. Each path must accept or refuse
// each value alike (internal/wire holds the one set of rules).
func TestEveryPathGivesAHeaderTheSameVerdict(t *testing.T) {
	deep := any("leaf")
	for range 34 {
		deep = map[string]any{"n": deep}
	}
	long := strings.Repeat("h", 256)
	tests := []struct {
		name  string
		key   string
		value any
		ok    bool
	}{
		{name: "string", value: "text", ok: true},
		{name: "invalid UTF-8", value: "a\xffb", ok: true},
		{name: "bool", value: true, ok: true},
		{name: "nil", value: nil, ok: true},
		{name: "int", value: 7, ok: true},
		{name: "int8", value: int8(-8), ok: true},
		{name: "uint8", value: uint8(8), ok: true},
		{name: "int16", value: int16(-16), ok: true},
		{name: "uint16", value: uint16(16), ok: true},
		{name: "int32", value: int32(-32), ok: true},
		{name: "uint32", value: uint32(32), ok: true},
		{name: "int64", value: int64(1) << 40, ok: true},
		{name: "float32", value: float32(1.5), ok: true},
		{name: "float64", value: 2.5, ok: true},
		{name: "bytes", value: []byte{0, 0xff}, ok: true},
		{name: "time", value: time.Unix(1700000000, 0).UTC(), ok: true},
		{name: "decimal", value: amqp.Decimal{Scale: 2, Value: 12345}, ok: true},
		{name: "array", value: []any{"a", int32(1), []any{true}}, ok: true},
		{name: "table", value: map[string]any{"a": map[string]any{"b": int64(2)}}, ok: true},
		{name: "uint", value: uint(1)},
		{name: "uint64", value: uint64(1)},
		{name: "[]string", value: []string{"a"}},
		{name: "amqp.Table", value: amqp.Table{"a": "b"}},
		{name: "struct", value: struct{}{}},
		{name: "map[string]string", value: map[string]string{"a": "b"}},
		{name: "a struct in an array", value: []any{struct{}{}}},
		{name: "34 levels deep", value: deep},
		{name: "a name of 256 bytes", key: long, value: "v"},
		{name: "a field name of 256 bytes", value: map[string]any{long: "v"}},
		// RabbitMQ cannot parse these and closes the connection.
		{name: "NaN", value: math.NaN()},
		{name: "float32 -Inf", value: float32(math.Inf(-1))},
		{name: "+Inf in a table", value: map[string]any{"f": math.Inf(1)}},
		// The outbox stores times as RFC 3339 text: years 0 to 9999.
		{name: "year 0", value: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), ok: true},
		{name: "before 1970", value: time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), ok: true},
		{name: "the last second of 9999", value: time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), ok: true},
		{name: "year 10000", value: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{name: "year -1", value: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
		{name: "year 10000 in an array", value: []any{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
	}
	brokers := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{name: "memory", url: func(t *testing.T) string { return acemqtest.Memory(t) }},
		{name: "rabbitmq", url: func(t *testing.T) string { return acemqtest.RabbitMQ(t) }},
	}
	// prefix is how the refusal begins: a Send's is acemq's (the outbox's
	// Send runs the Conn's Prepare), a transport's Publish the transport's.
	verdict := func(t *testing.T, path, prefix string, ok bool, err error) {
		t.Helper()
		if ok && err != nil {
			t.Errorf("%s refused it: %v", path, err)
		}
		if !ok && err == nil {
			t.Errorf("%s accepted it", path)
		}
		if err != nil && !strings.HasPrefix(err.Error(), prefix) {
			t.Errorf("%s: the error does not begin %q: %v", path, prefix, err)
		}
	}
	for _, br := range brokers {
		t.Run(br.name, func(t *testing.T) {
			url := br.url(t)
			c := connect(t, url)
			queue := acemqtest.QueueName(t, "verdict")
			acemqtest.DeleteQueuesAfter(t, url, queue)
			require.NoError(t, c.Declare(t.Context(), acemq.Queue{Name: queue}))
			pub := acemq.NewPublisher[Order](c, "", queue)
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					key := tc.key
					if key == "" {
						key = "x-value"
					}
					verdict(t, "Send", "acemq: ", tc.ok, pub.Send(t.Context(), Order{ID: "v"}, acemq.Header(key, tc.value)))
					err := c.Transport().Publish(t.Context(), transport.Message{
						RoutingKey: queue, MessageID: "v", Body: []byte("{}"),
						Headers: map[string]any{key: tc.value},
					})
					verdict(t, "the transport's Publish", br.name+": publish to exchange ", tc.ok, err)
				})
			}
		})
	}
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		o := newOutbox(t, db, d)
		c := connect(t, acemqtest.Memory(t))
		pub := outbox.NewPublisher[Order](o, c, "", "verdict")
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				key := tc.key
				if key == "" {
					key = "x-value"
				}
				tx, err := db.BeginTx(t.Context(), nil)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback() }()
				verdict(t, "the outbox's Send", "acemq: ", tc.ok, pub.Send(t.Context(), tx, Order{ID: "v"}, acemq.Header(key, tc.value)))
			})
		}
	})
}

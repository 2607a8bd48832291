package wire

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
)

func TestCheckTopologyNamesFieldAndLimit(t *testing.T) {
	long := strings.Repeat("n", 300)
	for _, tc := range []struct {
		name  string
		it    transport.Topology
		wants string // "" means accepted
	}{
		{"exchange name", transport.Exchange{Name: long}, "the exchange name is 300 bytes, more than the 255 AMQP allows"},
		{"exchange argument name", transport.Exchange{Name: "x", Args: map[string]any{long: "v"}}, "arguments: an argument name of 300 bytes, more than the 255"},
		{"exchange argument NaN", transport.Exchange{Name: "x", Args: map[string]any{"a": math.NaN()}}, "argument a: the float NaN cannot travel"},
		{"queue name", transport.Queue{Name: long}, "the queue name is 300 bytes"},
		{"queue argument name", transport.Queue{Name: "q", Args: map[string]any{long: int64(1)}}, "an argument name of 300 bytes, more than the 255"},
		{"queue argument value", transport.Queue{Name: "q", Args: map[string]any{"x-message-ttl": uint64(1)}}, "argument x-message-ttl: a uint64 cannot travel"},
		{"binding key", transport.Binding{Exchange: "x", Key: long, Queue: "q"}, "the binding key is 300 bytes, more than the 255 AMQP allows"},
		{"binding exchange", transport.Binding{Exchange: long, Key: "k", Queue: "q"}, "the exchange name is 300 bytes"},
		{"binding queue", transport.Binding{Exchange: "x", Key: "k", Queue: long}, "the queue name is 300 bytes"},
		{"exchange binding source", transport.ExchangeBinding{Source: long, Destination: "d"}, "the source exchange name is 300 bytes"},
		{"exchange binding key", transport.ExchangeBinding{Source: "s", Key: long, Destination: "d"}, "the binding key is 300 bytes"},
		{"exchange binding destination", transport.ExchangeBinding{Source: "s", Destination: long}, "the destination exchange name is 300 bytes"},
		{"a pointer", &transport.Queue{Name: long}, "the queue name is 300 bytes"},
		{"255 bytes everywhere", transport.Binding{Exchange: long[:255], Key: long[:255], Queue: long[:255]}, ""},
		{"good arguments", transport.Queue{Name: "q", Args: map[string]any{"x-message-ttl": int64(1000), long[:255]: 1.5}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckTopology(tc.it)
			switch {
			case tc.wants == "" && err != nil:
				t.Fatalf("CheckTopology(%s) = %v; want nil", Describe(tc.it), err)
			case tc.wants != "" && (err == nil || !strings.Contains(err.Error(), tc.wants)):
				t.Fatalf("CheckTopology(%s) = %v; want an error containing %q", Describe(tc.it), err, tc.wants)
			}
		})
	}
}

func TestCheckMessageNamesFieldAndLimit(t *testing.T) {
	long := strings.Repeat("k", 256)
	for _, tc := range []struct {
		name  string
		edit  func(m *transport.Message)
		wants string
	}{
		{"exchange", func(m *transport.Message) { m.Exchange = long }, "the exchange name is 256 bytes, more than the 255 AMQP allows"},
		{"routing key", func(m *transport.Message) { m.RoutingKey = long }, "the routing key is 256 bytes"},
		{"content type", func(m *transport.Message) { m.ContentType = long }, "the content type is 256 bytes"},
		{"message ID", func(m *transport.Message) { m.MessageID = long }, "the message ID is 256 bytes"},
		{"correlation ID", func(m *transport.Message) { m.CorrelationID = long }, "the correlation ID is 256 bytes"},
		{"type", func(m *transport.Message) { m.Type = long }, "the type is 256 bytes"},
		{"app ID", func(m *transport.Message) { m.AppID = long }, "the app ID is 256 bytes"},
		{"reply-to", func(m *transport.Message) { m.ReplyTo = long }, "the reply-to is 256 bytes"},
		{"header name", func(m *transport.Message) { m.Headers = map[string]any{long: 1} }, "headers: a header name of 256 bytes"},
		{"header infinity", func(m *transport.Message) { m.Headers = map[string]any{"f": math.Inf(1)} }, `header "f": the float +Inf cannot travel`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := transport.Message{Exchange: "x", RoutingKey: "k", MessageID: "id"}
			if err := CheckMessage(m); err != nil {
				t.Fatalf("CheckMessage of a good message = %v", err)
			}
			tc.edit(&m)
			if err := CheckMessage(m); err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("CheckMessage = %v; want an error containing %q", err, tc.wants)
			}
		})
	}
}

// TestCheckValueFloatsAndTimes: the values RabbitMQ cannot parse, or the
// outbox cannot read back, are refused wherever they are nested; their
// neighbours that can are not.
func TestCheckValueFloatsAndTimes(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		ok   bool
	}{
		{"NaN", math.NaN(), false},
		{"+Inf", math.Inf(1), false},
		{"float32 -Inf", float32(math.Inf(-1)), false},
		{"NaN in a table", map[string]any{"a": []any{math.NaN()}}, false},
		{"largest float64", math.MaxFloat64, true},
		{"smallest float32", float32(math.SmallestNonzeroFloat32), true},
		{"year 10000", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{"year -1", time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC), false},
		{"year 10000 in an array", []any{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, false},
		{"9999-12-31 23:59:59 UTC", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), true},
		{"year 0", time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"before 1970", time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"9999-12-31 23:00 at UTC-2, year 10000 in UTC", time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("west", -2*3600)), false},
		{"10000-01-01 01:00 at UTC+5, year 9999 in UTC", time.Date(10000, 1, 1, 1, 0, 0, 0, time.FixedZone("east", 5*3600)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckValue(tc.v, 0)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckValue(%v) = %v; want ok=%v", tc.v, err, tc.ok)
			}
		})
	}
}

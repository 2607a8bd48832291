package rabbitmq_test

import (
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/internal/wire"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// tableBuilder turns fuzz bytes into an AMQP table of every field type
// amqp091-go delivers, nested tables and arrays included, with keys drawn
// from the reserved x-acemq- names as well as arbitrary ones.
type tableBuilder struct{ data []byte }

func (b *tableBuilder) byte() byte {
	if len(b.data) == 0 {
		return 0
	}
	c := b.data[0]
	b.data = b.data[1:]
	return c
}

func (b *tableBuilder) bytes() []byte {
	n := min(int(b.byte()%24), len(b.data))
	out := b.data[:n]
	b.data = b.data[n:]
	return out
}

func (b *tableBuilder) u64() uint64 {
	var buf [8]byte
	copy(buf[:], b.data)
	b.data = b.data[min(8, len(b.data)):]
	return binary.LittleEndian.Uint64(buf[:])
}

var fuzzKeys = []string{
	"x-acemq-id", "x-acemq-type", "x-acemq-version", "x-acemq-correlation-id", "x-acemq-causation-id",
	"x-acemq-attempt", "x-acemq-first-seen", "x-acemq-origin", "x-acemq-error", "X-ACEMQ-ATTEMPT",
	"x-acemq-itinerary", "x-death", "traceparent", "x-tenant",
}

func (b *tableBuilder) key() string {
	c := b.byte()
	if int(c) < 2*len(fuzzKeys) && c%2 == 0 {
		return fuzzKeys[int(c)/2]
	}
	return string(b.bytes())
}

func (b *tableBuilder) table(depth int) amqp.Table {
	t := amqp.Table{}
	for n := int(b.byte() % 8); n > 0 && len(b.data) > 0; n-- {
		t[b.key()] = b.value(depth)
	}
	return t
}

func (b *tableBuilder) value(depth int) any {
	switch b.byte() % 17 {
	case 0:
		return string(b.bytes())
	case 1:
		return b.bytes()
	case 2:
		return b.byte()%2 == 0
	case 3:
		return int8(b.byte())
	case 4:
		return uint8(b.byte())
	case 5:
		return int16(b.u64())
	case 6:
		return uint16(b.u64())
	case 7:
		return int32(b.u64())
	case 8:
		return uint32(b.u64())
	case 9:
		return int64(b.u64())
	case 10: // no NaN or infinity arrives: RabbitMQ cannot parse them, and wire refuses them
		if f := math.Float32frombits(uint32(b.u64())); !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) {
			return f
		}
		return float32(0.5)
	case 11:
		if f := math.Float64frombits(b.u64()); !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f
		}
		return 0.5
	case 12: // up to the end of 9999 (less a day, for the local zone), what wire lets travel
		return time.Unix(int64(b.u64()%(253402300800-86400)), 0)
	case 13:
		return nil
	case 14:
		return amqp.Decimal{Scale: b.byte(), Value: int32(b.u64())}
	case 15:
		if depth < wire.MaxDepth { // deeper never arrives: the frame guard stands in for it
			return b.table(depth + 1)
		}
	case 16:
		if depth < wire.MaxDepth {
			var a []any
			for n := int(b.byte() % 6); n > 0 && len(b.data) > 0; n-- {
				a = append(a, b.value(depth+1))
			}
			return a
		}
	}
	return string(b.bytes())
}

// FuzzHeadersFromTable converts fuzzed AMQP tables as a delivery's headers
// are converted, and reads the envelope from them as a consumer does: no
// panic, no amqp091 table reaches the engine, the envelope and its Headers
// are never nil, application headers pass and reserved ones never do, and
// converting back for a publish gives the table that arrived.
func FuzzHeadersFromTable(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 10, 9, 0x40, 0x42, 0x0f, 0, 0, 0, 0, 0})            // x-acemq-attempt: int64
	f.Add([]byte{2, 10, 0, 3, 'a', 'b', 'c', 26, 15, 1, 28, 0, 1, 'x'}) // attempt "abc", a nested table
	f.Add([]byte("\x04\x0c\x00\x0clast tuesday\x1b\x10\x03\x00\x01a\x02\x01\x0e\x05\x07\x00\x00\x00"))
	f.Add([]byte(strings.Repeat("\x07\x1b\x0f", 40))) // deep nesting
	f.Fuzz(func(t *testing.T, data []byte) {
		b := &tableBuilder{data: data}
		in := b.table(0)
		h := rabbitmq.FromTable(in)
		if h == nil {
			t.Fatal("FromTable returned nil")
		}
		noTable(t, h)

		env, err := acemq.EnvelopeOf(transport.Message{Headers: h})
		if env == nil || env.Headers == nil || env.ID == "" {
			t.Fatalf("no usable envelope: %+v (err %v)", env, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "acemq: ") {
			t.Fatalf("error without the acemq prefix: %v", err)
		}
		if err == nil && (env.Attempt < 1 || env.Version < 1) {
			t.Fatalf("a readable envelope with attempt %d, version %d", env.Attempt, env.Version)
		}
		for k, v := range h {
			reserved := strings.HasPrefix(strings.ToLower(k), acemq.ReservedPrefix)
			got, ok := env.Headers[k]
			switch {
			case reserved && ok:
				t.Fatalf("reserved header %q reached Envelope.Headers", k)
			case !reserved && (!ok || !reflect.DeepEqual(got, v)):
				t.Fatalf("application header %q: got %#v, want %#v", k, got, v)
			}
		}

		back, err := rabbitmq.ToTable(h)
		if err != nil {
			t.Fatalf("ToTable refused what FromTable made: %v", err)
		}
		if len(in) == 0 {
			in = nil
		}
		if !reflect.DeepEqual(emptyArrays(back), emptyArrays(in)) {
			t.Fatalf("round trip changed the table:\n got %#v\nwant %#v", back, in)
		}
	})
}

// emptyArrays replaces nil arrays with empty ones: amqp091-go reads an
// empty array as nil, the conversion gives an empty one, and both travel as
// the same bytes.
func emptyArrays(v any) any {
	switch x := v.(type) {
	case amqp.Table:
		out := make(amqp.Table, len(x))
		for k, e := range x {
			out[k] = emptyArrays(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = emptyArrays(e)
		}
		return out
	}
	return v
}

// noTable fails if an amqp.Table is left anywhere in v.
func noTable(t *testing.T, v any) {
	t.Helper()
	switch x := v.(type) {
	case amqp.Table:
		t.Fatalf("an amqp.Table reached the engine: %#v", x)
	case map[string]any:
		for _, e := range x {
			noTable(t, e)
		}
	case []any:
		for _, e := range x {
			noTable(t, e)
		}
	}
}

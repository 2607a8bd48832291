package wire

import (
	"bytes"
	"fmt"
	"math"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The limits of an AMQP field table as amqp091-go reads one. A message
// over them cannot be read: amqp091-go fails the whole connection.
const (
	// MaxDepth is how deeply tables and arrays may nest.
	MaxDepth = 32
	// MaxEntries is the most entries in one table or array.
	MaxEntries = 8192
	// MaxShortString is the longest AMQP short string, in bytes: a table
	// field name, an exchange, a routing key, most properties.
	MaxShortString = 255
	// MaxHeaders is the most application headers a message may be sent
	// with. It leaves room under MaxEntries for the reserved headers the
	// engine renders (four at most) and the x-death headers a broker adds
	// when a retry tier dead-letters (up to seven), so that no move the
	// engine makes turns a readable message into an unreadable one.
	MaxHeaders = MaxEntries - 64
)

// Decimal is AMQP's decimal value, as amqp091-go reads it.
type Decimal = amqp.Decimal

// CheckHeaders reports the first reason the header table h cannot travel:
// more than max entries, a name longer than [MaxShortString], or a value
// [CheckValue] refuses. The reason names the header; it carries no
// "acemq: " prefix, so callers wrap it once.
func CheckHeaders(h map[string]any, max int) error {
	if len(h) > max {
		return fmt.Errorf("%d headers, more than the %d a message may carry", len(h), max)
	}
	for k, v := range h {
		if len(k) > MaxShortString {
			return fmt.Errorf("a header name of %d bytes, more than the %d AMQP allows", len(k), MaxShortString)
		}
		if err := CheckValue(v, 0); err != nil {
			return fmt.Errorf("header %q: %w", k, err)
		}
	}
	return nil
}

// CheckValue reports why v, found at nesting depth (0 for a header's own
// value), cannot travel in an AMQP table, or nil when it can.
func CheckValue(v any, depth int) error {
	switch x := v.(type) {
	case nil, bool, int8, uint8, int, int16, uint16, int32, uint32, int64, string, []byte, Decimal:
		return nil
	case float32:
		return checkFloat(float64(x))
	case float64:
		return checkFloat(x)
	case time.Time:
		// Its own location's year is what the outbox writes, UTC's what a
		// consumer reads from AMQP's seconds.
		if y, u := x.Year(), x.UTC().Year(); min(y, u) < MinYear || max(y, u) > MaxYear {
			return fmt.Errorf("the time %s is outside the years %d to %d that every path reads back", x.UTC().Format(time.RFC3339), MinYear, MaxYear)
		}
		return nil
	case []any:
		if depth >= MaxDepth { // amqp091 reads a container here at depth+1
			return fmt.Errorf("nested deeper than %d levels", MaxDepth)
		}
		if len(x) > MaxEntries {
			return fmt.Errorf("an array of %d elements, more than the %d an AMQP reader accepts", len(x), MaxEntries)
		}
		for i, e := range x {
			if err := CheckValue(e, depth+1); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
		return nil
	case map[string]any:
		if depth >= MaxDepth {
			return fmt.Errorf("nested deeper than %d levels", MaxDepth)
		}
		if len(x) > MaxEntries {
			return fmt.Errorf("a table of %d entries, more than the %d an AMQP reader accepts", len(x), MaxEntries)
		}
		for k, e := range x {
			if len(k) > MaxShortString {
				return fmt.Errorf("a field name of %d bytes, more than the %d AMQP allows", len(k), MaxShortString)
			}
			if err := CheckValue(e, depth+1); err != nil {
				return fmt.Errorf("field %q: %w", k, err)
			}
		}
		return nil
	}
	return fmt.Errorf("a %T cannot travel in an AMQP table (use a string, bool, integer, float, []byte, time.Time, []any or map[string]any)", v)
}

// TableSize is about the size, in bytes, of h encoded as an AMQP field
// table: each field's name and value with its type and length prefixes.
// It reads every value, so it costs what the table holds.
func TableSize(h map[string]any) int {
	n := 4
	for k, v := range h {
		n += 1 + len(k) + valueSize(v)
	}
	return n
}

func valueSize(v any) int {
	switch x := v.(type) {
	case string:
		return 5 + len(x)
	case []byte:
		return 5 + len(x)
	case []any:
		n := 5
		for _, e := range x {
			n += valueSize(e)
		}
		return n
	case map[string]any:
		return 1 + TableSize(x)
	}
	return 9 // a type byte and at most 8 bytes of number, time or decimal
}

// The years a time value may fall in. AMQP carries a timestamp as 64-bit
// seconds, which RabbitMQ and amqp091-go take in any year, but the outbox
// stores a header time as RFC 3339 text, which reads back only the years 0
// to 9999: a time outside them would be accepted and then strand its row.
const (
	MinYear = 0
	MaxYear = 9999
)

// checkFloat refuses NaN and the infinities: RabbitMQ (3.10 at least)
// cannot parse them in a table and closes the whole connection, with 541
// INTERNAL_ERROR, on the publish that carries one.
func checkFloat(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("the float %v cannot travel: RabbitMQ closes the connection on a NaN or an infinity in a table (send it as a string)", f)
	}
	return nil
}

// Int reads v as an int64 when it is an integer type an AMQP table
// carries, or a float holding a whole number no larger than 2^53.
func Int(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case float32:
		f := float64(x)
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, false
		}
		return int64(f), true
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return 0, false
		}
		return int64(x), true
	}
	return 0, false
}

// Number reads v as a float64 when it is an integer or float type an AMQP
// table carries, for comparing values (queue arguments, say) whatever their
// Go type. uint and uint64 are not among them: CheckValue refuses them
// before any value is compared.
func Number(v any) (float64, bool) {
	switch n := v.(type) {
	case float32:
		return float64(n), true
	case float64:
		return n, true
	}
	if i, ok := Int(v); ok {
		return float64(i), true
	}
	return 0, false
}

// ToTable checks h as [CheckHeaders] does (up to [MaxEntries]) and
// converts it to amqp091-go's table, nested maps included. Byte slices are
// copied, so the caller may reuse its own. An empty h gives nil.
func ToTable(h map[string]any) (amqp.Table, error) {
	if len(h) == 0 {
		return nil, nil
	}
	if err := CheckHeaders(h, MaxEntries); err != nil {
		return nil, err
	}
	return TableOf(h), nil
}

// TableOf is [ToTable] without the check, for a table its caller has
// already checked (with [CheckMessage], say): a publish walks its headers
// once, not twice. What it does with a value the check refuses is
// unspecified. An empty h gives nil.
func TableOf(h map[string]any) amqp.Table {
	if len(h) == 0 {
		return nil
	}
	t := make(amqp.Table, len(h))
	for k, v := range h {
		t[k] = toField(v)
	}
	return t
}

func toField(v any) any {
	switch x := v.(type) {
	case map[string]any:
		t := make(amqp.Table, len(x))
		for k, e := range x {
			t[k] = toField(e)
		}
		return t
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = toField(e)
		}
		return out
	case []byte:
		return bytes.Clone(x)
	case int:
		// amqp091 writes an int as a 32-bit field, cutting what is larger.
		return int64(x)
	}
	return v
}

// FromTable converts an amqp091-go table to plain maps, nested tables
// included, so the engine never meets an amqp091 container type. It never
// returns nil.
func FromTable(t amqp.Table) map[string]any {
	m := make(map[string]any, len(t))
	for k, v := range t {
		m[k] = fromField(v)
	}
	return m
}

func fromField(v any) any {
	switch x := v.(type) {
	case amqp.Table:
		return FromTable(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = fromField(e)
		}
		return out
	}
	return v
}

// ExchangeName is the name an exchange goes by in metrics and traces:
// "amq.default" for the default exchange (""), as the messaging
// conventions and RabbitMQ's own tools name it, else exchange itself.
func ExchangeName(exchange string) string {
	if exchange == "" {
		return "amq.default"
	}
	return exchange
}

package outbox

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/internal/wire"
)

// storedEnvelope is the JSON form of an acemq.Envelope in the headers
// column. Header values are encoded by encodeValue so that they come back
// with the Go type they had.
type storedEnvelope struct {
	ID            string                     `json:"id"`
	Type          string                     `json:"type,omitempty"`
	Version       int                        `json:"version"`
	CorrelationID string                     `json:"correlation_id,omitempty"`
	CausationID   string                     `json:"causation_id,omitempty"`
	Attempt       int                        `json:"attempt"`
	FirstSeen     time.Time                  `json:"first_seen"`
	Origin        string                     `json:"origin,omitempty"`
	Error         string                     `json:"error,omitempty"`
	ReplyTo       string                     `json:"reply_to,omitempty"`
	Key           string                     `json:"key,omitempty"`
	Due           string                     `json:"due,omitempty"` // acemq.After's or At's, RFC 3339
	Headers       map[string]json.RawMessage `json:"headers,omitempty"`
	Reserved      map[string]json.RawMessage `json:"reserved,omitempty"`
	// Headers and reserved headers whose names are not valid UTF-8, which
	// a JSON object key cannot hold, under their names in base64.
	Headers64  map[string]json.RawMessage `json:"headers_b64,omitempty"`
	Reserved64 map[string]json.RawMessage `json:"reserved_b64,omitempty"`
}

// tagged is how a header value that plain JSON would change is stored:
// {"$t": "int32", "v": 7}. Every JSON object in the headers is one. A
// string that is not valid UTF-8, which JSON would turn into U+FFFD, is
// {"$t": "string", "v": base64}; a nested table with a name that is not
// valid UTF-8 is {"$t": "table_b64", "v": {base64 name: value}}.
type tagged struct {
	T string          `json:"$t"`
	V json.RawMessage `json:"v"`
}

// marshalEnvelope renders e, its headers and its reserved x-acemq- headers
// (a routing slip's, say) as JSON.
func marshalEnvelope(e *acemq.Envelope) (string, error) {
	s := storedEnvelope{
		ID: e.ID, Type: e.Type, Version: e.Version,
		CorrelationID: e.CorrelationID, CausationID: e.CausationID,
		Attempt: e.Attempt, FirstSeen: e.FirstSeen.UTC(), Origin: e.Origin,
		Error: e.Error, ReplyTo: e.ReplyTo, Key: e.Key,
	}
	if !e.Due.IsZero() {
		s.Due = e.Due.UTC().Format(time.RFC3339Nano)
	}
	var err error
	if s.Headers, s.Headers64, err = encodeTable(e.Headers); err != nil {
		return "", fmt.Errorf("outbox: storing message %q: %w", e.ID, err)
	}
	if s.Reserved, s.Reserved64, err = encodeTable(e.Reserved()); err != nil {
		return "", fmt.Errorf("outbox: storing message %q: %w", e.ID, err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("outbox: storing message %q: %w", e.ID, err)
	}
	return string(b), nil
}

// unmarshalEnvelope reads what marshalEnvelope wrote.
func unmarshalEnvelope(text []byte) (*acemq.Envelope, error) {
	var s storedEnvelope
	if err := json.Unmarshal(text, &s); err != nil {
		return nil, err
	}
	e := &acemq.Envelope{
		ID: s.ID, Type: s.Type, Version: s.Version,
		CorrelationID: s.CorrelationID, CausationID: s.CausationID,
		Attempt: s.Attempt, FirstSeen: s.FirstSeen.UTC(), Origin: s.Origin,
		Error: s.Error, ReplyTo: s.ReplyTo, Key: s.Key,
	}
	if s.Due != "" {
		due, err := time.Parse(time.RFC3339Nano, s.Due)
		if err != nil {
			return nil, fmt.Errorf("due %q is not an RFC 3339 time", s.Due)
		}
		e.Due = due
	}
	var err error
	if e.Headers, err = decodeTables(s.Headers, s.Headers64, 0); err != nil {
		return nil, err
	}
	if len(s.Reserved)+len(s.Reserved64) > 0 {
		reserved, err := decodeTables(s.Reserved, s.Reserved64, 0)
		if err != nil {
			return nil, err
		}
		for k, v := range reserved {
			if err := e.SetReserved(k, v); err != nil {
				return nil, err
			}
		}
	}
	return e, nil
}

// maxDepth is how deeply stored tables nest: AMQP's limit, no more.
const maxDepth = wire.MaxDepth

// encodeTable encodes m's values under their names, and those whose name
// is not valid UTF-8 apart, under their names in base64. m has passed
// Prepare's checks (wire.CheckHeaders), which bound its depth.
func encodeTable(m map[string]any) (plain, b64 map[string]json.RawMessage, err error) {
	if m == nil {
		return nil, nil, nil
	}
	plain = make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		raw, err := encodeValue(v)
		if err != nil {
			return nil, nil, fmt.Errorf("header %q: %w", k, err)
		}
		if utf8.ValidString(k) {
			plain[k] = raw
			continue
		}
		if b64 == nil {
			b64 = make(map[string]json.RawMessage)
		}
		b64[base64.StdEncoding.EncodeToString([]byte(k))] = raw
	}
	return plain, b64, nil
}

// encodeValue stores strings, bools, nil and finite float64s as plain JSON
// and every other type AMQP tables carry as a tagged object. Its one
// refusal, a type no AMQP table carries, is for a caller that skipped
// Prepare (whose checks refuse such a type first), such as a test.
func encodeValue(v any) (json.RawMessage, error) {
	tag := func(t string, x any) (json.RawMessage, error) {
		b, err := json.Marshal(x)
		if err != nil {
			return nil, err
		}
		return json.Marshal(tagged{T: t, V: b})
	}
	switch x := v.(type) {
	case nil, bool:
		return json.Marshal(x)
	case string:
		if !utf8.ValidString(x) {
			return tag("string", base64.StdEncoding.EncodeToString([]byte(x)))
		}
		return json.Marshal(x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return tag("float64", strconv.FormatFloat(x, 'g', -1, 64))
		}
		return json.Marshal(x)
	case float32:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return tag("float32", strconv.FormatFloat(f, 'g', -1, 32))
		}
		return tag("float32", x)
	case int:
		return tag("int", x)
	case int8:
		return tag("int8", x)
	case int16:
		return tag("int16", x)
	case int32:
		return tag("int32", x)
	case int64:
		return tag("int64", x)
	case uint8:
		return tag("uint8", x)
	case uint16:
		return tag("uint16", x)
	case uint32:
		return tag("uint32", x)
	case []byte:
		return tag("bytes", base64.StdEncoding.EncodeToString(x))
	case time.Time:
		return tag("time", x.Format(time.RFC3339Nano))
	case wire.Decimal:
		return tag("decimal", storedDecimal{Scale: x.Scale, Value: x.Value})
	case []any:
		parts := make([]json.RawMessage, len(x))
		for i, e := range x {
			raw, err := encodeValue(e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			parts[i] = raw
		}
		return json.Marshal(parts)
	case map[string]any:
		t, b64, err := encodeTable(x)
		if err != nil {
			return nil, err
		}
		if len(b64) > 0 {
			for k, raw := range t {
				b64[base64.StdEncoding.EncodeToString([]byte(k))] = raw
			}
			return tag("table_b64", b64)
		}
		if t == nil {
			t = map[string]json.RawMessage{}
		}
		return tag("table", t)
	}
	return nil, fmt.Errorf("a %T cannot travel in an AMQP table", v)
}

// decodeTables reads what encodeTable wrote: plain's names as they are,
// b64's in base64.
func decodeTables(plain, b64 map[string]json.RawMessage, depth int) (map[string]any, error) {
	out, err := decodeTable(plain, depth)
	if err != nil || len(b64) == 0 {
		return out, err
	}
	for k64, raw := range b64 {
		k, err := base64.StdEncoding.DecodeString(k64)
		if err != nil {
			return nil, fmt.Errorf("header name %q: %w", k64, err)
		}
		if out[string(k)], err = decodeValue(raw, depth); err != nil {
			return nil, fmt.Errorf("header %q: %w", k, err)
		}
	}
	return out, nil
}

func decodeTable(m map[string]json.RawMessage, depth int) (map[string]any, error) {
	out := make(map[string]any, len(m))
	for k, raw := range m {
		v, err := decodeValue(raw, depth)
		if err != nil {
			return nil, fmt.Errorf("header %q: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

func decodeValue(raw json.RawMessage, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, fmt.Errorf("empty value")
	}
	switch raw[0] {
	case '{':
		var t tagged
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, err
		}
		return decodeTagged(t, depth)
	case '[':
		var parts []json.RawMessage
		if err := json.Unmarshal(raw, &parts); err != nil {
			return nil, err
		}
		out := make([]any, len(parts))
		for i, p := range parts {
			v, err := decodeValue(p, depth+1)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out[i] = v
		}
		return out, nil
	}
	var v any // null, bool, string or a float64
	err := json.Unmarshal(raw, &v)
	return v, err
}

// storedDecimal is how an AMQP decimal is stored: its scale and value.
type storedDecimal struct {
	Scale uint8 `json:"scale"`
	Value int32 `json:"value"`
}

// intBits is the width of each stored integer type.
var intBits = map[string]int{"int": strconv.IntSize, "int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16, "uint32": 32}

// decodeTagged turns a tagged object back into a value of its type.
func decodeTagged(t tagged, depth int) (any, error) {
	var (
		i   int64
		u   uint64
		s   string
		err error
	)
	switch t.T {
	case "int", "int8", "int16", "int32", "int64":
		if i, err = strconv.ParseInt(string(t.V), 10, intBits[t.T]); err != nil {
			return nil, fmt.Errorf("%s value %s: %w", t.T, t.V, err)
		}
	case "uint8", "uint16", "uint32":
		if u, err = strconv.ParseUint(string(t.V), 10, intBits[t.T]); err != nil {
			return nil, fmt.Errorf("%s value %s: %w", t.T, t.V, err)
		}
	case "float32", "float64", "bytes", "string", "time":
		if len(t.V) > 0 && t.V[0] == '"' {
			if err = json.Unmarshal(t.V, &s); err != nil {
				return nil, err
			}
		} else {
			s = string(t.V)
		}
	}
	switch t.T {
	case "int":
		return int(i), nil
	case "int8":
		return int8(i), nil
	case "int16":
		return int16(i), nil
	case "int32":
		return int32(i), nil
	case "int64":
		return i, nil
	case "uint8":
		return uint8(u), nil
	case "uint16":
		return uint16(u), nil
	case "uint32":
		return uint32(u), nil
	case "float32":
		f, err := strconv.ParseFloat(s, 32)
		return float32(f), err
	case "float64":
		return strconv.ParseFloat(s, 64)
	case "bytes":
		return base64.StdEncoding.DecodeString(s)
	case "string":
		b, err := base64.StdEncoding.DecodeString(s)
		return string(b), err
	case "time":
		return time.Parse(time.RFC3339Nano, s)
	case "decimal":
		var d storedDecimal
		if err := json.Unmarshal(t.V, &d); err != nil {
			return nil, fmt.Errorf("decimal value %s: %w", t.V, err)
		}
		return wire.Decimal{Scale: d.Scale, Value: d.Value}, nil
	case "table":
		var m map[string]json.RawMessage
		if err := json.Unmarshal(t.V, &m); err != nil {
			return nil, err
		}
		return decodeTable(m, depth+1)
	case "table_b64":
		var m map[string]json.RawMessage
		if err := json.Unmarshal(t.V, &m); err != nil {
			return nil, err
		}
		return decodeTables(nil, m, depth+1)
	}
	return nil, fmt.Errorf("unknown stored type %q", t.T)
}

package outbox

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnvelopeRoundTripsWithHeaderTypes(t *testing.T) {
	when := time.Date(2025, 3, 1, 12, 30, 0, 123456789, time.FixedZone("CET", 3600))
	tests := []struct {
		name  string
		value any
	}{
		{name: "string", value: "acme"},
		{name: "empty string", value: ""},
		{name: "string with a NUL and non-ASCII", value: "a\x00b→"},
		{name: "bool", value: true},
		{name: "nil", value: nil},
		{name: "float64", value: 2.5},
		{name: "whole float64", value: float64(3)},
		{name: "NaN", value: math.NaN()},
		{name: "infinity", value: math.Inf(-1)},
		{name: "float32", value: float32(1.25)},
		{name: "int", value: 42},
		{name: "int8", value: int8(-8)},
		{name: "int16", value: int16(-16)},
		{name: "int32", value: int32(1 << 30)},
		{name: "int64 beyond float precision", value: int64(math.MaxInt64)},
		{name: "uint8", value: uint8(255)},
		{name: "uint16", value: uint16(65535)},
		{name: "uint32", value: uint32(math.MaxUint32)},
		{name: "bytes", value: []byte{0, 1, 0xff}},
		{name: "time", value: when},
		{name: "array", value: []any{"a", int32(1), []any{true}}},
		{name: "table", value: map[string]any{"n": int16(2), "inner": map[string]any{"s": "x"}}},
		{name: "empty table", value: map[string]any{}},
		{name: "a table that looks tagged", value: map[string]any{"$t": "int32", "v": "7"}},
		{name: "invalid UTF-8", value: "a\xffb\xc3"},
		{name: "invalid UTF-8 in an array", value: []any{"\xfe", "ok"}},
		{name: "invalid UTF-8 in a table's value and name", value: map[string]any{"\xff\x00k": "v\x80", "plain": int8(1)}},
		{name: "a string that looks like base64", value: "YQ=="},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &acemq.Envelope{
				ID: "id-1", Type: "Order", Version: 2, CorrelationID: "c", CausationID: "k",
				Attempt: 1, FirstSeen: when.UTC(), Origin: "svc@host", ReplyTo: "r", Key: "order-1",
				Headers: map[string]any{"h": tc.value},
			}
			require.NoError(t, in.SetReserved("x-acemq-slip", []any{"a", "b"}))
			text, err := marshalEnvelope(in)
			require.NoError(t, err)
			out, err := unmarshalEnvelope([]byte(text))
			require.NoError(t, err)
			got := out.Headers["h"]
			if f, ok := tc.value.(float64); ok && math.IsNaN(f) {
				assert.True(t, math.IsNaN(got.(float64)))
			} else if w, ok := tc.value.(time.Time); ok {
				g, ok := got.(time.Time)
				require.True(t, ok, "got a %T", got)
				assert.True(t, w.Equal(g))
				_, wo := w.Zone()
				_, gOff := g.Zone()
				assert.Equal(t, wo, gOff, "the offset was lost")
			} else {
				assert.Equal(t, tc.value, got)
			}
			out.Headers, in.Headers = nil, nil
			assert.Equal(t, in, out)
		})
	}
}

func TestEnvelopeKeepsHeaderNamesThatAreNotUTF8(t *testing.T) {
	in := &acemq.Envelope{ID: "m", FirstSeen: time.Unix(1, 0).UTC(), Headers: map[string]any{
		"\xffname": "\xfevalue", "plain": "v", "": "empty name",
	}}
	require.NoError(t, in.SetReserved("x-acemq-\xff", "r"))
	text, err := marshalEnvelope(in)
	require.NoError(t, err)
	assert.NotContains(t, text, "\ufffd", "a byte became U+FFFD")
	out, err := unmarshalEnvelope([]byte(text))
	require.NoError(t, err)
	assert.Equal(t, in.Headers, out.Headers)
	assert.Equal(t, "r", out.Reserved()["x-acemq-\xff"])
}

func TestEnvelopeRefusesWhatAnAMQPTableCannotCarry(t *testing.T) {
	tests := []struct {
		name  string
		value any
	}{
		{name: "struct", value: struct{}{}},
		{name: "uint64", value: uint64(1)},
		{name: "nested func", value: []any{func() {}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := marshalEnvelope(&acemq.Envelope{ID: "m", Headers: map[string]any{"h": tc.value}})
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), `outbox: storing message "m": header "h"`), err.Error())
		})
	}
}

func TestUnmarshalEnvelopeReportsDamage(t *testing.T) {
	tests := []struct {
		name, text string
	}{
		{name: "not JSON", text: "{"},
		{name: "unknown tag", text: `{"id":"m","headers":{"h":{"$t":"complex128","v":1}}}`},
		{name: "int8 out of range", text: `{"id":"m","headers":{"h":{"$t":"int8","v":300}}}`},
		{name: "bad base64", text: `{"id":"m","headers":{"h":{"$t":"bytes","v":"%%"}}}`},
		{name: "bad time", text: `{"id":"m","headers":{"h":{"$t":"time","v":"yesterday"}}}`},
		{name: "too deep", text: `{"id":"m","headers":{"h":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := unmarshalEnvelope([]byte(tc.text))
			assert.Error(t, err)
		})
	}
}

func TestBackoffDoublesUpToItsCap(t *testing.T) {
	r := &Relay{cfg: relayConfig{minBackoff: time.Second, maxBackoff: 10 * time.Second}}
	tests := []struct {
		name     string
		failures int
		want     time.Duration
	}{
		{name: "first failure", failures: 1, want: time.Second},
		{name: "second", failures: 2, want: 2 * time.Second},
		{name: "fourth", failures: 4, want: 8 * time.Second},
		{name: "capped", failures: 5, want: 10 * time.Second},
		{name: "far beyond", failures: 1000, want: 10 * time.Second},
		{name: "zero", failures: 0, want: time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, r.backoff(tc.failures))
		})
	}
}

package acemq

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq/transport"
)

func TestRenderParseRoundTrip(t *testing.T) {
	e := &Envelope{
		ID: "id-1", Type: "OrderPlaced", Version: 2, CorrelationID: "c", CausationID: "k",
		Attempt: 3, FirstSeen: time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC),
		Origin: "svc@host", Error: "boom", ReplyTo: "amq.rabbitmq.reply-to.x",
		Headers:  map[string]any{"x-tenant": "alpha", "x-acemq-forged": "dropped"},
		reserved: map[string]any{"x-acemq-itinerary": []any{"a", "b"}},
	}
	m := render(e, "ex", "key", "application/json", []byte("{}"))
	got, err := parseEnvelope(&m)
	if err != nil {
		t.Fatal(err)
	}
	want := e.Clone()
	want.Headers = map[string]any{"x-tenant": "alpha"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseForeignMessage(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		m    transport.Message
		want func(t *testing.T, e *Envelope)
	}{
		{"AMQP properties only", transport.Message{MessageID: "m-1", Type: "legacy.Thing", CorrelationID: "c-1", AppID: "php-app", Timestamp: ts, Headers: map[string]any{"foo": "bar"}},
			func(t *testing.T, e *Envelope) {
				if e.ID != "m-1" || e.Type != "legacy.Thing" || e.CorrelationID != "c-1" || e.Origin != "php-app" || !e.FirstSeen.Equal(ts) || e.Attempt != 1 || e.Version != 1 || e.Headers["foo"] != "bar" {
					t.Fatalf("derived %+v", e)
				}
			}},
		{"nothing at all", transport.Message{},
			func(t *testing.T, e *Envelope) {
				if len(e.ID) != 36 || e.Attempt != 1 || e.Headers == nil || e.FirstSeen.IsZero() {
					t.Fatalf("derived %+v", e)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := parseEnvelope(&tc.m)
			if err != nil {
				t.Fatal(err)
			}
			tc.want(t, e)
		})
	}
}

func TestParseMalformedReservedHeaders(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     map[string]any
		wants string
	}{
		{"attempt as text", map[string]any{hdrAttempt: "abc"}, "x-acemq-attempt is a string"},
		{"attempt negative", map[string]any{hdrAttempt: int32(-1)}, "x-acemq-attempt is -1"},
		{"attempt huge", map[string]any{hdrAttempt: int64(1) << 62}, "x-acemq-attempt is 4611686018427387904"},
		{"attempt fractional", map[string]any{hdrAttempt: 1.5}, "want a whole number"},
		{"version zero", map[string]any{hdrVersion: int32(0)}, "x-acemq-version is 0"},
		{"first seen unparseable", map[string]any{hdrFirstSeen: "yesterday"}, `x-acemq-first-seen is "yesterday"`},
		{"first seen a number", map[string]any{hdrFirstSeen: int64(5)}, "x-acemq-first-seen is a int64"},
		{"id a number", map[string]any{hdrID: int32(5)}, "x-acemq-id is a int32, want a string"},
		{"origin invalid UTF-8", map[string]any{hdrOrigin: "\xff\xfe"}, "x-acemq-origin is not valid UTF-8"},
		{"upper case name", map[string]any{"X-ACEMQ-ATTEMPT": "x"}, "X-ACEMQ-ATTEMPT is a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := parseEnvelope(&transport.Message{Headers: tc.h})
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("error %v, want one containing %q", err, tc.wants)
			}
			if e == nil || e.Headers == nil || e.ID == "" {
				t.Fatalf("no best-effort envelope: %+v", e)
			}
		})
	}
}

func TestCheckValueDepth(t *testing.T) {
	var v any = "leaf"
	for range maxHeaderDepth + 2 {
		v = map[string]any{"n": v}
	}
	if err := checkValue(v, 0); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("got %v", err)
	}
}

// FuzzEnvelope renders an envelope made of fuzzed fields, parses it back and
// checks nothing panics and the fields survive; it also parses the fuzzed
// values as hostile reserved headers.
func FuzzEnvelope(f *testing.F) {
	f.Add("id", "OrderPlaced", 1, 1, "corr", "origin", "err", "x-tenant", "alpha", int64(0))
	f.Add("", "", 0, -1, "", "", "", "x-acemq-id", "forged", int64(math.MaxInt64))
	f.Add("\xff", "日本", 7, 1<<30, "a\x00b", "", "", "", "", int64(-5))
	f.Fuzz(func(t *testing.T, id, typ string, version, attempt int, corr, origin, errText, hk, hv string, n int64) {
		e := &Envelope{ID: id, Type: typ, Version: version, Attempt: attempt, CorrelationID: corr,
			Origin: origin, Error: errText, FirstSeen: time.Unix(0, n).UTC(), Headers: map[string]any{hk: hv}}
		m := render(e, "", "k", "application/json", nil)
		got, err := parseEnvelope(&m)
		if got == nil || got.Headers == nil {
			t.Fatal("no envelope")
		}
		if err == nil {
			if id != "" && got.ID != id {
				t.Fatalf("id %q became %q", id, got.ID)
			}
			if got.Attempt != attempt || got.Version != version || got.Type != typ || got.Origin != origin || got.Error != errText {
				t.Fatalf("fields changed: %+v from %+v", got, e)
			}
			if !got.FirstSeen.Equal(e.FirstSeen) {
				t.Fatalf("first seen %v became %v", e.FirstSeen, got.FirstSeen)
			}
		}
		if isReserved(hk) {
			if _, ok := got.Headers[hk]; ok {
				t.Fatalf("reserved header %q reached Headers", hk)
			}
		} else if got.Headers[hk] != hv {
			t.Fatalf("header %q lost", hk)
		}
		hostile := transport.Message{Headers: map[string]any{hdrAttempt: hv, hdrFirstSeen: hv, hdrID: n, hdrVersion: hv, hk: n}}
		if e, _ := parseEnvelope(&hostile); e == nil || e.Headers == nil {
			t.Fatal("no envelope for hostile headers")
		}
	})
}

// TestTableSizeLimits: what amqp091-go would refuse to read is refused at
// Send, and a message whose headers leave no room for what a move adds is
// unreadable on receipt.
func TestTableSizeLimits(t *testing.T) {
	many := func(n int) map[string]any {
		h := make(map[string]any, n)
		for i := range n {
			h[strings.Repeat("k", 1+i%7)+string(rune('a'+i%26))+time.Duration(i).String()] = true
		}
		return h
	}
	for _, tc := range []struct {
		name  string
		err   error
		wants string
	}{
		{"too many headers to send", checkHeaders(many(maxHeaders + 1)), "more than the 8128 a message may carry"},
		{"a table too big to read", checkHeaderValue("t", many(maxTableEntries+1)), "a table of 8193 entries"},
		{"an array too big to read", checkHeaderValue("a", make([]any, maxTableEntries+1)), "an array of 8193 elements"},
		{"too many headers to read", func() error {
			_, err := parseEnvelope(&transport.Message{Headers: many(maxReadHeaders + 1)})
			return err
		}(), "the message has 8177 headers, more than the 8176 acemq accepts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil || !strings.Contains(tc.err.Error(), tc.wants) {
				t.Fatalf("error %v, want one containing %q", tc.err, tc.wants)
			}
		})
	}
	if err := checkHeaders(many(maxHeaders)); err != nil {
		t.Fatalf("%d headers refused: %v", maxHeaders, err)
	}
}

func TestClipReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
	}{
		{"short", "boom"},
		{"at the limit", strings.Repeat("x", maxReason)},
		{"over, ASCII", strings.Repeat("x", 10*maxReason)},
		{"over, cut inside a rune", strings.Repeat("x", maxReason-4) + strings.Repeat("日", 100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := clipReason(tc.in)
			if len(got) > maxReason || !utf8.ValidString(got) {
				t.Fatalf("clipReason gave %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
			}
			if len(tc.in) <= maxReason && got != tc.in {
				t.Fatalf("a short reason changed: %q", got)
			}
		})
	}
}

package acemq

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq/internal/wire"
	"github.com/acemq/acemq/transport"
)

func TestRenderParseRoundTrip(t *testing.T) {
	e := &Envelope{
		ID: "id-1", Type: "OrderPlaced", Version: 2, CorrelationID: "c", CausationID: "k",
		Attempt: 3, FirstSeen: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		Origin: "svc@host", Error: "boom", ReplyTo: "amq.rabbitmq.reply-to.x", Key: "order-42",
		Headers:  map[string]any{"x-tenant": "alpha", "x-acemq-forged": "dropped"},
		reserved: map[string]any{"x-acemq-itinerary": []any{"a", "b"}},
	}
	m := render(e, "ex", "key", "application/json", []byte("{}"), true)
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

// TestRenderWireV2 pins SPEC §3's table: the fields in the AMQP properties,
// and a reserved header only for what no property holds, only when it
// differs from the default.
func TestRenderWireV2(t *testing.T) {
	seen := time.Date(2026, 12, 1, 10, 11, 12, 987654321, time.UTC)
	base := func() *Envelope {
		return &Envelope{ID: "id-1", Type: "OrderPlaced", Version: 1, CorrelationID: "conv", Attempt: 1,
			FirstSeen: seen, Origin: "svc@host", ReplyTo: "replies", Error: "left by an interceptor"}
	}
	for _, tc := range []struct {
		name    string
		change  func(e *Envelope)
		moved   bool
		headers map[string]any
	}{
		{name: "first attempt, version 1: no header at all", change: func(*Envelope) {}},
		{name: "version 2", change: func(e *Envelope) { e.Version = 2 }, headers: map[string]any{hdrVersion: int32(2)}},
		{name: "a causation", change: func(e *Envelope) { e.CausationID = "cause" }, headers: map[string]any{hdrCausationID: "cause"}},
		{name: "an ordering key", change: func(e *Envelope) { e.Key = "order-7" }, headers: map[string]any{hdrKey: "order-7"}},
		{name: "a retry writes attempt and error", change: func(e *Envelope) { e.Attempt = 2 }, moved: true,
			headers: map[string]any{hdrAttempt: int32(2), hdrError: "left by an interceptor"}},
		{name: "application headers only", change: func(e *Envelope) { e.Headers = map[string]any{"x-tenant": "a"} },
			headers: map[string]any{"x-tenant": "a"}},
		{name: "a reserved name in Headers is dropped", change: func(e *Envelope) {
			e.Headers = map[string]any{"x-tenant": "a", "X-ACEMQ-ID": "forged", hdrAttempt: int32(9)}
		}, headers: map[string]any{"x-tenant": "a"}},
		{name: "a field's header in the reserved map is never written", change: func(e *Envelope) {
			e.reserved = map[string]any{hdrType: "forged", "x-acemq-itinerary": "a"}
		}, headers: map[string]any{"x-acemq-itinerary": "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := base()
			tc.change(e)
			m := render(e, "ex", "key", "application/json", []byte("{}"), tc.moved)
			want := transport.Message{
				Exchange: "ex", RoutingKey: "key", ContentType: "application/json", Body: []byte("{}"),
				MessageID: "id-1", Type: "OrderPlaced", CorrelationID: "conv", AppID: "svc@host", ReplyTo: "replies",
				Timestamp: time.Date(2026, 12, 1, 10, 11, 12, 0, time.UTC), Headers: tc.headers,
			}
			if !reflect.DeepEqual(m, want) {
				t.Fatalf("rendered\n %+v\nwant\n %+v", m, want)
			}
		})
	}
}

// TestParseWireV1 reads messages as earlier builds wrote them: every field
// in a reserved header, mirrored in the properties. The header wins.
func TestParseWireV1(t *testing.T) {
	seen := time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)
	m := transport.Message{
		MessageID: "prop-id", Type: "PropType", CorrelationID: "prop-corr", AppID: "prop-app",
		Timestamp: seen.Add(-time.Hour).Truncate(time.Second), ReplyTo: "r",
		Headers: map[string]any{
			hdrID: "id-1", hdrType: "OrderPlaced", hdrVersion: int32(1), hdrCorrelationID: "c",
			hdrCausationID: "k", hdrAttempt: int32(1), hdrFirstSeen: seen.Format(time.RFC3339Nano),
			hdrOrigin: "svc@host", "x-tenant": "alpha",
		},
	}
	got, err := parseEnvelope(&m)
	if err != nil {
		t.Fatal(err)
	}
	want := &Envelope{ID: "id-1", Type: "OrderPlaced", Version: 1, CorrelationID: "c", CausationID: "k",
		Attempt: 1, FirstSeen: seen, Origin: "svc@host", ReplyTo: "r", Headers: map[string]any{"x-tenant": "alpha"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("v1 message read as\n %+v\nwant\n %+v", got, want)
	}
	// Moved (retried), it goes out in v2 with its timestamp and app-id as
	// the header said, to the second.
	next := got.Clone()
	next.Attempt, next.Error = 2, "boom"
	out := render(next, "", "q.retry.1s", "application/json", nil, true)
	if out.MessageID != "id-1" || out.AppID != "svc@host" || !out.Timestamp.Equal(seen.Truncate(time.Second)) ||
		!reflect.DeepEqual(out.Headers, map[string]any{hdrCausationID: "k", hdrAttempt: int32(2), hdrError: "boom", "x-tenant": "alpha"}) {
		t.Fatalf("moved v1 message rendered as %+v", out)
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
	for range wire.MaxDepth + 2 {
		v = map[string]any{"n": v}
	}
	if err := checkHeaderValue("h", v); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("got %v", err)
	}
}

// FuzzEnvelope renders an envelope made of fuzzed fields in wire format v2,
// parses it back and checks nothing panics, that an envelope Send would
// accept comes back field for field (FirstSeen to the second), and that
// only the reserved headers SPEC §3 allows are written. The same values are
// parsed as a v1 message, whose headers must win over its properties, and
// as hostile reserved headers.
func FuzzEnvelope(f *testing.F) {
	f.Add("id", "OrderPlaced", 1, 1, "corr", "cause", "origin", "err", "x-tenant", "alpha", int64(0), true)
	f.Add("", "", 0, -1, "", "", "", "", "x-acemq-id", "forged", int64(math.MaxInt64), false)
	f.Add("\xff", "日本", 7, 1<<30, "a\x00b", "\xfe", "", "", "", "", int64(-5), true)
	f.Add(strings.Repeat("i", 256), "t", 2, 3, "c", "", "o", "e", "X-ACEMQ-ATTEMPT", "9", int64(1e18), true)
	f.Fuzz(func(t *testing.T, id, typ string, version, attempt int, corr, cause, origin, errText, hk, hv string, n int64, moved bool) {
		e := &Envelope{ID: id, Type: typ, Version: version, Attempt: attempt, CorrelationID: corr, CausationID: cause,
			Origin: origin, Error: errText, FirstSeen: time.Unix(0, n).UTC(), Headers: map[string]any{hk: hv}}
		m := render(e, "", "k", "application/json", nil, moved)
		for k := range m.Headers {
			if isReserved(k) && k != hdrVersion && k != hdrCausationID && k != hdrAttempt && k != hdrError {
				t.Fatalf("render wrote reserved header %q", k)
			}
		}
		if (e.Version == 1) != (m.Headers[hdrVersion] == nil) || (e.Attempt > 1) != (m.Headers[hdrAttempt] != nil) ||
			(moved && errText != "") != (m.Headers[hdrError] != nil) || (cause != "") != (m.Headers[hdrCausationID] != nil) {
			t.Fatalf("reserved headers %v for %+v (moved %v)", m.Headers, e, moved)
		}
		got, err := parseEnvelope(&m)
		if got == nil || got.Headers == nil {
			t.Fatal("no envelope")
		}
		if checkEnvelope(e) == nil {
			if err != nil {
				t.Fatalf("an envelope Send accepts did not parse: %v", err)
			}
			wantErr := ""
			if moved {
				wantErr = errText
			}
			if got.ID != id || got.Attempt != attempt || got.Version != version || got.Type != typ || got.CorrelationID != corr ||
				got.CausationID != cause || got.Origin != origin || got.Error != wantErr {
				t.Fatalf("fields changed: %+v from %+v", got, e)
			}
			if !got.FirstSeen.Equal(e.FirstSeen.Truncate(time.Second)) {
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

		v1 := transport.Message{MessageID: "p-" + id, Type: "p-" + typ, CorrelationID: "p-" + corr, AppID: "p-" + origin,
			Timestamp: time.Unix(1, 0), Headers: map[string]any{hdrID: id, hdrType: typ, hdrCorrelationID: corr, hdrOrigin: origin,
				hdrFirstSeen: e.FirstSeen.Format(time.RFC3339Nano), hdrVersion: int32(version), hdrAttempt: int32(attempt)}}
		old, err := parseEnvelope(&v1)
		if old == nil || old.Headers == nil {
			t.Fatal("no envelope for a v1 message")
		}
		if err == nil && (old.Type != typ || old.CorrelationID != corr || old.Origin != origin || (id != "" && old.ID != id) || !old.FirstSeen.Equal(e.FirstSeen)) {
			t.Fatalf("a v1 header lost to its property: %+v", old)
		}

		hostile := transport.Message{Headers: map[string]any{hdrAttempt: hv, hdrFirstSeen: hv, hdrID: n, hdrVersion: hv, hk: n}}
		if e, _ := parseEnvelope(&hostile); e == nil || e.Headers == nil {
			t.Fatal("no envelope for hostile headers")
		}
	})
}

// TestCheckEnvelope: what an interceptor can leave that AMQP or the parse
// could not carry back is refused, with the reason.
func TestCheckEnvelope(t *testing.T) {
	ok := func() *Envelope {
		return &Envelope{ID: "id", Type: "T", Version: 1, Attempt: 1, FirstSeen: time.Now()}
	}
	if err := checkEnvelope(ok()); err != nil {
		t.Fatalf("a good envelope refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(e *Envelope)
		wants  string
	}{
		{"version 0", func(e *Envelope) { e.Version = 0 }, "Version is 0, want 1 to"},
		{"version negative", func(e *Envelope) { e.Version = -3 }, "Version is -3"},
		{"version beyond int32", func(e *Envelope) { e.Version = math.MaxInt32 + 1 }, "Version is 2147483648"},
		{"empty ID", func(e *Envelope) { e.ID = "" }, "empty ID"},
		{"attempt 0", func(e *Envelope) { e.Attempt = 0 }, "Attempt is 0"},
		{"first seen before 1970", func(e *Envelope) { e.FirstSeen = time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC) }, "before 1970"},
		{"ID too long for message-id", func(e *Envelope) { e.ID = strings.Repeat("i", 256) }, "ID is 256 bytes, more than the 255"},
		{"type too long", func(e *Envelope) { e.Type = strings.Repeat("t", 300) }, "Type is 300 bytes"},
		{"origin too long", func(e *Envelope) { e.Origin = strings.Repeat("o", 256) }, "Origin is 256 bytes"},
		{"causation not UTF-8", func(e *Envelope) { e.CausationID = "\xff" }, "CausationID is not valid UTF-8"},
		{"key not UTF-8", func(e *Envelope) { e.Key = "k\xff" }, "Key is not valid UTF-8"},
		{"key too long", func(e *Envelope) { e.Key = strings.Repeat("k", 256) }, "Key is 256 bytes, more than the 255"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := ok()
			tc.change(e)
			if err := checkEnvelope(e); err == nil || !strings.Contains(err.Error(), tc.wants) || !strings.HasPrefix(err.Error(), "acemq: ") {
				t.Fatalf("error %v, want one containing %q", err, tc.wants)
			}
		})
	}
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

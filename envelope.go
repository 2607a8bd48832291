package acemq

import (
	"fmt"
	"maps"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq/transport"
	"github.com/google/uuid"
)

// Envelope is what acemq knows about a message besides its body: identity,
// lineage, delivery history and the application's headers. On the wire each
// field travels as a reserved x-acemq- header and, where AMQP has one, as
// the matching message property, so broker tools show it too.
type Envelope struct {
	ID            string         // UUIDv7 unless given
	Type          string         // default: the publisher's type name, e.g. "OrderPlaced"
	Version       int            // schema version, default 1
	CorrelationID string         // the conversation this message belongs to
	CausationID   string         // the ID of the message that caused this one
	Attempt       int            // 1 on the first delivery
	FirstSeen     time.Time      // UTC, set once when first published
	Origin        string         // who published it first, <executable>@<hostname> by default
	Error         string         // the last failure's reason (retries, dead letters, parked)
	ReplyTo       string         // where a reply goes (the AMQP reply-to property)
	Headers       map[string]any // the application's headers

	// reserved holds x-acemq- headers the fields above do not stand for,
	// such as a routing slip's; only acemq's own packages set them.
	reserved map[string]any

	// boxedType and boxedOrigin are the publisher's Type and the Conn's
	// Origin already boxed as header values; render uses them while the
	// fields still hold those strings, so each Send boxes neither again.
	boxedType, boxedOrigin any
}

// ReservedPrefix is the header namespace the engine owns. Application
// headers under it are refused by Header and dropped when an envelope is
// rendered onto the wire.
const ReservedPrefix = "x-acemq-"

// The reserved headers, one per Envelope field.
const (
	hdrID            = "x-acemq-id"
	hdrType          = "x-acemq-type"
	hdrVersion       = "x-acemq-version"
	hdrCorrelationID = "x-acemq-correlation-id"
	hdrCausationID   = "x-acemq-causation-id"
	hdrAttempt       = "x-acemq-attempt"
	hdrFirstSeen     = "x-acemq-first-seen"
	hdrOrigin        = "x-acemq-origin"
	hdrError         = "x-acemq-error"
	reservedCount    = 9
)

// maxTableEntries is the most entries amqp091-go reads in one AMQP table or
// array; a message carrying more makes the reading connection fail as a
// whole, again at every redelivery. maxHeaders, what Send accepts, and
// maxReadHeaders, what a consumer accepts, leave room under it for the
// reserved headers the engine renders (9) and the x-death headers a broker
// adds when a retry tier dead-letters (up to 7), so that no move the engine
// makes turns a readable message into an unreadable one.
const (
	maxTableEntries = 8192
	maxHeaders      = maxTableEntries - 64
	maxReadHeaders  = maxTableEntries - 16
)

// maxAttempt bounds x-acemq-attempt: a larger value is not a history any
// real ladder produces, so it is read as damage rather than obeyed.
const maxAttempt = 1_000_000

// isReserved reports whether name is in the engine's namespace, whatever
// its case.
func isReserved(name string) bool {
	return len(name) >= len(ReservedPrefix) && strings.EqualFold(name[:len(ReservedPrefix)], ReservedPrefix)
}

// Clone returns a copy of e whose Headers map is its own (the values are
// shared). A nil e gives nil.
func (e *Envelope) Clone() *Envelope {
	if e == nil {
		return nil
	}
	c := *e
	c.Headers = maps.Clone(e.Headers)
	c.reserved = maps.Clone(e.reserved)
	return &c
}

// newID returns a UUIDv7, falling back to a v4 if the clock source fails.
func newID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}

// render writes e and body into a transport message: application headers
// first (reserved names dropped), then the reserved ones, then the AMQP
// properties a broker tool shows.
func render(e *Envelope, exchange, key, contentType string, body []byte) transport.Message {
	n := len(e.Headers) + len(e.reserved) + 5 // id, type, version, attempt, first-seen
	for _, s := range [...]string{e.CorrelationID, e.CausationID, e.Origin, e.Error} {
		if s != "" {
			n++
		}
	}
	h := make(map[string]any, n)
	for k, v := range e.Headers {
		if !isReserved(k) {
			h[k] = v
		}
	}
	for k, v := range e.reserved {
		h[k] = v
	}
	h[hdrID] = e.ID
	h[hdrType] = boxed(e.boxedType, e.Type)
	h[hdrVersion] = int32(e.Version)
	h[hdrAttempt] = int32(e.Attempt)
	h[hdrFirstSeen] = e.FirstSeen.UTC().Format(time.RFC3339Nano)
	if e.CorrelationID != "" {
		h[hdrCorrelationID] = e.CorrelationID
	}
	if e.CausationID != "" {
		h[hdrCausationID] = e.CausationID
	}
	if e.Origin != "" {
		h[hdrOrigin] = boxed(e.boxedOrigin, e.Origin)
	}
	if e.Error != "" {
		h[hdrError] = e.Error
	}
	return transport.Message{
		Exchange:      exchange,
		RoutingKey:    key,
		Headers:       h,
		ContentType:   contentType,
		MessageID:     e.ID,
		CorrelationID: e.CorrelationID,
		Type:          e.Type,
		AppID:         e.Origin,
		ReplyTo:       e.ReplyTo,
		Timestamp:     e.FirstSeen,
		Body:          body,
	}
}

// boxed returns b when it holds the string s, else s boxed anew.
func boxed(b any, s string) any {
	if bs, ok := b.(string); ok && bs == s {
		return b
	}
	return s
}

// parseEnvelope reads the envelope of a message that arrived. It never
// fails to return one: a message from a foreign producer gets an envelope
// derived from its AMQP properties. The error is non-nil when a reserved
// header is present but unreadable; the message is then parked with it.
func parseEnvelope(m *transport.Message) (*Envelope, error) {
	e := &Envelope{
		ID:            m.MessageID,
		Type:          m.Type,
		Version:       1,
		CorrelationID: m.CorrelationID,
		Attempt:       1,
		FirstSeen:     m.Timestamp.UTC(),
		Origin:        m.AppID,
		ReplyTo:       m.ReplyTo,
		Headers:       make(map[string]any, applicationHeaders(m.Headers)),
	}
	var problem error
	note := func(err error) {
		if problem == nil {
			problem = err
		}
	}
	if len(m.Headers) > maxReadHeaders {
		note(fmt.Errorf("acemq: the message has %d headers, more than the %d acemq accepts", len(m.Headers), maxReadHeaders))
	}
	for k, v := range m.Headers {
		if !isReserved(k) {
			e.Headers[k] = v
			continue
		}
		switch strings.ToLower(k) {
		case hdrID:
			note(readString(k, v, &e.ID))
		case hdrType:
			note(readString(k, v, &e.Type))
		case hdrCorrelationID:
			note(readString(k, v, &e.CorrelationID))
		case hdrCausationID:
			note(readString(k, v, &e.CausationID))
		case hdrOrigin:
			note(readString(k, v, &e.Origin))
		case hdrError:
			note(readString(k, v, &e.Error))
		case hdrVersion:
			note(readInt(k, v, 1, math.MaxInt32, &e.Version))
		case hdrAttempt:
			note(readInt(k, v, 1, maxAttempt, &e.Attempt))
		case hdrFirstSeen:
			note(readTime(k, v, &e.FirstSeen))
		case transport.UnreadableHeaders:
			note(fmt.Errorf("acemq: %v", v))
		default:
			// Other names in the namespace belong to acemq's patterns (the
			// routing slip) or to newer engines: kept, out of Headers.
			if e.reserved == nil {
				e.reserved = make(map[string]any)
			}
			e.reserved[k] = v
		}
	}
	if e.ID == "" {
		e.ID = newID()
	}
	if e.FirstSeen.IsZero() {
		e.FirstSeen = time.Now().UTC()
	}
	return e, problem
}

// applicationHeaders counts the headers outside the reserved namespace, to
// size Envelope.Headers: sized for all of them, a map past eight entries
// costs several allocations more.
func applicationHeaders(h map[string]any) int {
	n := 0
	for k := range h {
		if !isReserved(k) {
			n++
		}
	}
	return n
}

func readString(name string, v any, dst *string) error {
	switch s := v.(type) {
	case string:
		if !utf8.ValidString(s) {
			return fmt.Errorf("acemq: header %s is not valid UTF-8", name)
		}
		*dst = s
	case []byte:
		if !utf8.Valid(s) {
			return fmt.Errorf("acemq: header %s is not valid UTF-8", name)
		}
		*dst = string(s)
	default:
		return fmt.Errorf("acemq: header %s is a %T, want a string", name, v)
	}
	return nil
}

func readInt(name string, v any, lo, hi int64, dst *int) error {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	case float32:
		if float64(x) != math.Trunc(float64(x)) {
			return fmt.Errorf("acemq: header %s is %v, want a whole number", name, x)
		}
		n = int64(x)
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return fmt.Errorf("acemq: header %s is %v, want a whole number", name, x)
		}
		n = int64(x)
	default:
		return fmt.Errorf("acemq: header %s is a %T (%s), want an integer", name, v, quoteValue(v))
	}
	if n < lo || n > hi {
		return fmt.Errorf("acemq: header %s is %d, want %d to %d", name, n, lo, hi)
	}
	*dst = int(n)
	return nil
}

func readTime(name string, v any, dst *time.Time) error {
	switch x := v.(type) {
	case time.Time:
		*dst = x.UTC()
		return nil
	case string:
		t, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return fmt.Errorf("acemq: header %s is %s, want an RFC 3339 time", name, quoteValue(x))
		}
		*dst = t.UTC()
		return nil
	}
	return fmt.Errorf("acemq: header %s is a %T, want an RFC 3339 time", name, v)
}

// quoteValue renders a hostile value for a reason text: quoted, and cut
// short so a huge header cannot make a huge reason.
func quoteValue(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// checkHeaders reports the first application header whose value an AMQP
// table cannot carry.
func checkHeaders(h map[string]any) error {
	if len(h) > maxHeaders {
		return fmt.Errorf("acemq: %d headers, more than the %d a message may carry", len(h), maxHeaders)
	}
	for k, v := range h {
		if err := checkHeaderValue(k, v); err != nil {
			return err
		}
	}
	return nil
}

// checkHeaderValue reports whether v is something an AMQP table carries.
func checkHeaderValue(name string, v any) error {
	if err := checkValue(v, 0); err != nil {
		return fmt.Errorf("acemq: header %q: %w", name, err)
	}
	return nil
}

const maxHeaderDepth = 32

func checkValue(v any, depth int) error {
	if depth > maxHeaderDepth {
		return fmt.Errorf("nested deeper than %d levels", maxHeaderDepth)
	}
	switch x := v.(type) {
	case nil, bool, int8, uint8, int, int16, uint16, int32, uint32, int64, float32, float64, string, []byte, time.Time:
		return nil
	case []any:
		if len(x) > maxTableEntries {
			return fmt.Errorf("an array of %d elements, more than the %d an AMQP reader accepts", len(x), maxTableEntries)
		}
		for i, e := range x {
			if err := checkValue(e, depth+1); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
		return nil
	case map[string]any:
		if len(x) > maxTableEntries {
			return fmt.Errorf("a table of %d entries, more than the %d an AMQP reader accepts", len(x), maxTableEntries)
		}
		for k, e := range x {
			if err := checkValue(e, depth+1); err != nil {
				return fmt.Errorf("field %q: %w", k, err)
			}
		}
		return nil
	}
	return fmt.Errorf("a %T cannot travel in an AMQP table (use a string, bool, integer, float, []byte, time.Time, []any or map[string]any)", v)
}

// EnvelopeOf reads the envelope of a message as a consumer would: a message
// without acemq headers gets one derived from its AMQP properties, and the
// error reports reserved headers that are present but unreadable (the
// envelope is then a best effort). Tools that read queues directly, such as
// patterns.Replay, use it.
func EnvelopeOf(m transport.Message) (*Envelope, error) {
	return parseEnvelope(&m)
}

package acemq

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq/internal/wire"
	"github.com/acemq/acemq/transport"
	"github.com/google/uuid"
)

// Envelope is what acemq knows about a message besides its body: identity,
// lineage, delivery history and the application's headers. On the wire
// (format v2) each field travels in the AMQP property that holds it, so any
// AMQP client and the broker's tools read it natively; what no property
// holds travels in a reserved x-acemq- header, and only when it differs
// from the default. docs/envelope.md has the table.
type Envelope struct {
	ID            string         // UUIDv7 unless given; AMQP message-id
	Type          string         // default: the publisher's type name, e.g. "OrderPlaced"; AMQP type
	Version       int            // schema version, default 1
	CorrelationID string         // the conversation this message belongs to; AMQP correlation-id
	CausationID   string         // the ID of the message that caused this one
	Attempt       int            // 1 on the first delivery
	FirstSeen     time.Time      // UTC, set once when first published; AMQP timestamp, so whole seconds (a v1 header kept finer)
	Origin        string         // who published it first, <executable>@<hostname> by default; AMQP app-id
	Error         string         // the last failure's reason (retries, dead letters, parked)
	ReplyTo       string         // where a reply goes; AMQP reply-to
	Key           string         // the ordering key (see Ordered); header x-acemq-key, only when set
	Due           time.Time      // when a delayed message (After, At) was due; header x-acemq-due, only on such a message
	Headers       map[string]any // the application's headers

	// reserved holds x-acemq- headers the fields above do not stand for,
	// such as a routing slip's: see Reserved, SetReserved and
	// ReservedHeader.
	reserved map[string]any
	// cipherKey is CipherHeader's value, the key a sealed body names
	// (cipher.go); Reserved and SetReserved show it as that header.
	cipherKey string
}

// ReservedPrefix is the header namespace the engine owns. Application
// headers under it are refused by Header and dropped when an envelope is
// rendered onto the wire.
const ReservedPrefix = "x-acemq-"

// The reserved headers. Wire format v2 writes only version, causation-id,
// attempt, error, key (the ordering key, which the consistent-hash
// exchange of an ordered queue hashes) and due (a delayed message's due
// time, see After), each only when it differs from the default; the others are v1's, read (and winning over the property) so
// that queues written by earlier builds drain, and never written.
const (
	hdrVersion     = "x-acemq-version"
	hdrCausationID = "x-acemq-causation-id"
	hdrAttempt     = "x-acemq-attempt"
	hdrError       = "x-acemq-error"
	hdrKey         = "x-acemq-key"
	hdrDue         = "x-acemq-due"

	hdrID            = "x-acemq-id"             // v1: message-id in v2
	hdrType          = "x-acemq-type"           // v1: type in v2
	hdrCorrelationID = "x-acemq-correlation-id" // v1: correlation-id in v2
	hdrFirstSeen     = "x-acemq-first-seen"     // v1: timestamp in v2
	hdrOrigin        = "x-acemq-origin"         // v1: app-id in v2
)

// maxTableEntries is the most entries amqp091-go reads in one AMQP table or
// array; a message carrying more makes the reading connection fail as a
// whole, again at every redelivery. maxHeaders, what Send accepts, and
// maxReadHeaders, what a consumer accepts, leave room under it for the
// reserved headers the engine renders (five at most) and the x-death headers a broker
// adds when a retry tier dead-letters (up to 7), so that no move the engine
// makes turns a readable message into an unreadable one.
const (
	maxTableEntries = wire.MaxEntries
	maxHeaders      = wire.MaxHeaders
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

// render writes e and body into a transport message in wire format v2: the
// envelope's fields in the AMQP properties wherever AMQP has one, and in
// reserved headers only what no property holds, only when it differs from
// the default (SPEC §3). Application headers in the reserved namespace are
// dropped. moved says the message is one the engine moves (a retry, a dead
// letter, a parking, a replay, a relay): only such a message carries Error,
// and it goes without the broker's own headers (isBrokerHeader).
func render(e *Envelope, exchange, key, contentType string, body []byte, moved bool) transport.Message {
	m := transport.Message{
		Exchange:      exchange,
		RoutingKey:    key,
		ContentType:   contentType,
		MessageID:     e.ID,
		CorrelationID: e.CorrelationID,
		Type:          e.Type,
		AppID:         e.Origin,
		ReplyTo:       e.ReplyTo,
		Timestamp:     wireTime(e.FirstSeen),
		Body:          body,
	}
	extra := len(e.reserved)
	if e.Version != 1 {
		extra++
	}
	if e.CausationID != "" {
		extra++
	}
	if e.Attempt > 1 {
		extra++
	}
	if moved && e.Error != "" {
		extra++
	}
	if e.Key != "" {
		extra++
	}
	if e.cipherKey != "" {
		extra++
	}
	if !e.Due.IsZero() {
		extra++
	}
	clean := true
	for k := range e.Headers {
		if isReserved(k) || moved && isBrokerHeader(k) {
			clean = false
			break
		}
	}
	if extra == 0 && clean {
		// The common case: nothing to add and nothing to drop. Every
		// transport copies the map it is given, so it can go as it is.
		if len(e.Headers) > 0 {
			m.Headers = e.Headers
		}
		return m
	}
	h := make(map[string]any, len(e.Headers)+extra)
	for k, v := range e.Headers {
		if !isReserved(k) && !(moved && isBrokerHeader(k)) {
			h[k] = v
		}
	}
	for k, v := range e.reserved {
		if !isFieldHeader(k) {
			h[k] = v
		}
	}
	if e.Version != 1 {
		h[hdrVersion] = int32(e.Version)
	}
	if e.CausationID != "" {
		h[hdrCausationID] = e.CausationID
	}
	if e.Attempt > 1 {
		h[hdrAttempt] = int32(e.Attempt)
	}
	if moved && e.Error != "" {
		h[hdrError] = e.Error
	}
	if e.Key != "" {
		h[hdrKey] = e.Key
	}
	if e.cipherKey != "" {
		h[CipherHeader] = e.cipherKey
	}
	if !e.Due.IsZero() {
		h[hdrDue] = formatDue(e.Due)
	}
	if len(h) > 0 {
		m.Headers = h
	}
	return m
}

// isBrokerHeader reports whether name is one of the headers RabbitMQ adds
// itself: x-death and x-first-death-* and x-last-death-* when it
// dead-letters a message, x-delivery-count on a quorum queue's redelivery.
// The Envelope keeps them readable on the delivery; a move never
// republishes them, so they do not pile up hop after hop (and RabbitMQ
// 3.13+ ignores an x-death a client sends).
func isBrokerHeader(name string) bool {
	name = strings.ToLower(name)
	return name == "x-death" || name == "x-delivery-count" ||
		strings.HasPrefix(name, "x-first-death-") || strings.HasPrefix(name, "x-last-death-")
}

// wireTime is t as the AMQP timestamp property holds it: whole seconds, UTC.
// The zero time stays zero (no timestamp).
func wireTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Truncate(time.Second).UTC()
}

// isFieldHeader reports whether name is the reserved header of an Envelope
// field, in wire format v1 or v2: such a name in the reserved map would be
// read back as the field, so it is never rendered from there.
func isFieldHeader(name string) bool {
	switch strings.ToLower(name) {
	case hdrID, hdrType, hdrVersion, hdrCorrelationID, hdrCausationID,
		hdrAttempt, hdrFirstSeen, hdrOrigin, hdrError, hdrKey, hdrDue, transport.UnreadableHeaders:
		return true
	}
	return false
}

// parseEnvelope reads the envelope of a message that arrived, in wire
// format v2 or v1. It never fails to return one: the fields come from the
// AMQP properties, and a v1 header (x-acemq-id, -type, -correlation-id,
// -first-seen, -origin) wins over its property, so queues written by
// earlier builds drain. A message from a foreign producer gets the same
// treatment, with a new ID when it has none. The error is non-nil when a
// reserved header is present but unreadable, or a field could not be
// written to the wire again; the message is then parked with it. The
// error's text has no prefix: the callers say what was unreadable.
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
		note(fmt.Errorf("the message has %d headers, more than the %d acemq accepts", len(m.Headers), maxReadHeaders))
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
		case hdrKey:
			note(readString(k, v, &e.Key))
		case CipherHeader:
			note(readString(k, v, &e.cipherKey))
		case hdrVersion:
			note(readInt(k, v, 1, math.MaxInt32, &e.Version))
		case hdrAttempt:
			note(readInt(k, v, 1, maxAttempt, &e.Attempt))
		case hdrFirstSeen:
			note(readTime(k, v, &e.FirstSeen))
		case hdrDue:
			note(readTime(k, v, &e.Due))
		case transport.UnreadableHeaders:
			note(errors.New(fmt.Sprint(v)))
		default:
			// Other names in the namespace belong to acemq's patterns (the
			// routing slip) or to newer engines: kept, out of Headers.
			if e.reserved == nil {
				e.reserved = make(map[string]any)
			}
			e.reserved[k] = v
		}
	}
	// A v1 header may hold what no AMQP property can; a move would then
	// fail at every attempt, so the message is parked instead.
	note(checkProperties(e))
	if e.ID == "" {
		e.ID = newID()
	}
	if e.FirstSeen.IsZero() {
		e.FirstSeen = wireTime(time.Now())
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
			return fmt.Errorf("header %s is not valid UTF-8", name)
		}
		*dst = s
	case []byte:
		if !utf8.Valid(s) {
			return fmt.Errorf("header %s is not valid UTF-8", name)
		}
		*dst = string(s)
	default:
		return fmt.Errorf("header %s is a %T, want a string", name, v)
	}
	return nil
}

func readInt(name string, v any, lo, hi int64, dst *int) error {
	n, ok := wire.Int(v)
	if !ok {
		switch v.(type) {
		case float32, float64:
			return fmt.Errorf("header %s is %v, want a whole number", name, v)
		}
		return fmt.Errorf("header %s is a %T (%s), want an integer", name, v, quoteValue(v))
	}
	if n < lo || n > hi {
		return fmt.Errorf("header %s is %d, want %d to %d", name, n, lo, hi)
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
			return fmt.Errorf("header %s is %s, want an RFC 3339 time", name, quoteValue(x))
		}
		*dst = t.UTC()
		return nil
	}
	return fmt.Errorf("header %s is a %T, want an RFC 3339 time", name, v)
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

// EnvelopeOf reads the envelope of a message as a consumer would: a message
// without acemq headers gets one derived from its AMQP properties, and the
// error reports reserved headers that are present but unreadable (the
// envelope is then a best effort). Tools that read queues directly, such as
// patterns.Replay, use it.
func EnvelopeOf(m transport.Message) (*Envelope, error) {
	env, err := parseEnvelope(&m)
	if err != nil {
		return env, fmt.Errorf("acemq: %w", err)
	}
	return env, nil
}

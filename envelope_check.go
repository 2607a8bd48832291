package acemq

import (
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq/internal/wire"
)

// What AMQP cannot carry is refused before the broker sees it. A property,
// a table key, an exchange name and a routing key are AMQP short strings
// (at most 255 bytes); amqp091-go fails to frame a longer one, and a
// publish that can never be framed would otherwise be tried again and
// again. The rules live in internal/wire, which both transports run too.
// The checks run at Send (after the interceptors), at Prepare and at
// PublishRaw, so an envelope an interceptor left unrenderable fails that
// payload with the reason, and nothing is parked later at a consumer.

// checkMessage reports the first reason m cannot travel: an envelope that
// cannot be rendered, a destination or content type too long for AMQP, or
// a header value an AMQP table cannot carry.
func checkMessage(m *RawMessage) error {
	if err := checkEnvelope(m.Envelope); err != nil {
		return err
	}
	for _, f := range [...]struct{ name, value string }{
		{"exchange", m.Exchange}, {"routing key", m.RoutingKey}, {"content type", m.ContentType},
	} {
		if err := wire.CheckShortString(f.name, f.value); err != nil {
			return fmt.Errorf("acemq: %w", err)
		}
	}
	return checkHeaders(m.Envelope.Headers)
}

// checkEnvelope reports why e cannot be rendered so that a consumer reads
// back the same envelope: no ID, a Version or Attempt out of range, a
// FirstSeen before 1970 (AMQP's timestamp cannot carry it; a zero one
// travels as no timestamp), a field too long for its AMQP property, or a
// CausationID or Error, which travel as text headers, that is not UTF-8.
// Reserved names in Headers are not a reason: they are dropped (SPEC §3).
func checkEnvelope(e *Envelope) error {
	switch {
	case e == nil:
		return fmt.Errorf("acemq: the message has no envelope")
	case e.ID == "":
		return fmt.Errorf("acemq: the envelope has an empty ID")
	case e.Version < 1 || e.Version > math.MaxInt32:
		return fmt.Errorf("acemq: the envelope's Version is %d, want 1 to %d", e.Version, math.MaxInt32)
	case e.Attempt < 1 || e.Attempt > maxAttempt:
		return fmt.Errorf("acemq: the envelope's Attempt is %d, want 1 to %d", e.Attempt, maxAttempt)
	case !e.FirstSeen.IsZero() && e.FirstSeen.Before(time.Unix(0, 0)):
		return fmt.Errorf("acemq: the envelope's FirstSeen, %s, is before 1970, which AMQP cannot carry", e.FirstSeen.UTC().Format(time.RFC3339))
	}
	for _, f := range [...]struct{ name, value string }{{"CausationID", e.CausationID}, {"Error", e.Error}, {"Key", e.Key}} {
		if !utf8.ValidString(f.value) {
			// It travels as a header, which a consumer reads as text.
			return fmt.Errorf("acemq: the envelope's %s is not valid UTF-8", f.name)
		}
	}
	if err := checkProperties(e); err != nil {
		return fmt.Errorf("acemq: %w", err)
	}
	return nil
}

// checkProperties reports an envelope field too long for the AMQP property
// it travels in, or, for the ordering key, for the 255 bytes a key may have.
// Its text has no prefix: checkEnvelope adds acemq's, and parseEnvelope's
// callers add theirs.
func checkProperties(e *Envelope) error {
	if len(e.Key) > wire.MaxShortString {
		return fmt.Errorf("the envelope's Key is %d bytes, more than the %d a key may have", len(e.Key), wire.MaxShortString)
	}
	for _, f := range [...]struct{ name, value string }{
		{"ID", e.ID}, {"Type", e.Type}, {"CorrelationID", e.CorrelationID},
		{"Origin", e.Origin}, {"ReplyTo", e.ReplyTo},
	} {
		if err := wire.CheckShortString("envelope's "+f.name, f.value); err != nil {
			return err
		}
	}
	return nil
}

// checkHeaders reports the first application header whose value an AMQP
// table cannot carry; internal/wire holds the rules every path shares.
func checkHeaders(h map[string]any) error {
	if err := wire.CheckHeaders(h, maxHeaders); err != nil {
		return fmt.Errorf("acemq: %w", err)
	}
	return nil
}

// checkHeaderValue reports whether v is something an AMQP table carries.
func checkHeaderValue(name string, v any) error {
	if err := wire.CheckValue(v, 0); err != nil {
		return fmt.Errorf("acemq: header %q: %w", name, err)
	}
	return nil
}

package outbox

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/acemq/acemq"
)

// ErrInvalid is wrapped by the error of a Send given a message the
// database cannot store: a NUL byte or invalid UTF-8 where the database
// wants text, a time after the year 9999. What the broker would refuse (an
// AMQP short string over 255 bytes, a header value AMQP cannot carry) is
// refused before that by the Conn's own checks, with their error, as a
// direct Send would be. Either way nothing was written and the caller's
// transaction is still usable.
var ErrInvalid = errors.New("outbox: invalid message")

// checkMessage reports what in m the database would refuse, before Send
// touches the caller's transaction: a failed statement would abort it
// (PostgreSQL refuses NUL and invalid UTF-8 in TEXT). What the broker would
// refuse, Prepare has refused already (the Conn's envelope checks). Values
// are quoted with %q, so the error never carries a control byte.
func checkMessage(m acemq.RawMessage) error {
	e := m.Envelope
	fields := []struct {
		name, value string
		column      bool // stored in a TEXT column of its own, not only in the JSON
	}{
		{"message ID", e.ID, true},
		{"exchange", m.Exchange, true},
		{"routing key", m.RoutingKey, true},
		{"content type", m.ContentType, true},
		{"type", e.Type, false},
		{"correlation ID", e.CorrelationID, false},
		{"causation ID", e.CausationID, false},
		{"origin", e.Origin, false},
		{"reply-to", e.ReplyTo, false},
		{"key", e.Key, false},
		{"error", e.Error, false},
	}
	var errs []string
	for _, f := range fields {
		switch {
		case !utf8.ValidString(f.value):
			errs = append(errs, fmt.Sprintf("its %s %q is not valid UTF-8", f.name, f.value))
		case f.column && strings.IndexByte(f.value, 0) >= 0:
			errs = append(errs, fmt.Sprintf("its %s %q holds a NUL byte", f.name, f.value))
		}
	}
	if y := e.FirstSeen.Year(); y > 9999 {
		errs = append(errs, fmt.Sprintf("its first-seen time is in the year %d, after 9999", y))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: message %q: %s", ErrInvalid, e.ID, strings.Join(errs, "; "))
}

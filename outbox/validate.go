package outbox

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/internal/wire"
)

// maxShortString is the longest AMQP short string: the message ID,
// exchange, routing key, content type, type, correlation ID, reply-to and
// origin travel as one, and a longer one fails every publish.
const maxShortString = wire.MaxShortString

// ErrInvalid is wrapped by the error of a Send given a message the outbox
// cannot store or the broker would refuse: a NUL byte or invalid UTF-8
// where the database wants text, an AMQP short string over 255 bytes, a
// time outside the years 0 to 9999. Nothing was written and the caller's
// transaction is still usable.
var ErrInvalid = errors.New("acemq: outbox: invalid message")

// checkMessage reports what in m the database or the broker would refuse,
// before Send touches the caller's transaction: a failed statement would
// abort it (PostgreSQL refuses NUL and invalid UTF-8 in TEXT), and a value
// the broker refuses would fail every publish of the row. Values are
// quoted with %q, so the error never carries a control byte.
//
// Header names and values are checked by the rules every path shares
// (internal/wire), so the outbox refuses at Send what the broker would
// refuse at every publish of the row; what passes is stored byte for byte.
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
		{"error", e.Error, false},
	}
	var errs []string
	for _, f := range fields {
		switch {
		case !utf8.ValidString(f.value):
			errs = append(errs, fmt.Sprintf("its %s %q is not valid UTF-8", f.name, f.value))
		case f.column && strings.IndexByte(f.value, 0) >= 0:
			errs = append(errs, fmt.Sprintf("its %s %q holds a NUL byte", f.name, f.value))
		case f.name != "causation ID" && f.name != "error" && len(f.value) > maxShortString:
			errs = append(errs, fmt.Sprintf("its %s is %d bytes, more than the %d of an AMQP short string", f.name, len(f.value), maxShortString))
		}
	}
	if y := e.FirstSeen.Year(); y < 0 || y > 9999 {
		errs = append(errs, fmt.Sprintf("its first-seen time is in the year %d, outside 0 to 9999", y))
	}
	if err := wire.CheckHeaders(e.Headers, wire.MaxHeaders); err != nil {
		errs = append(errs, "its "+err.Error())
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: message %q: %s", ErrInvalid, e.ID, strings.Join(errs, "; "))
}

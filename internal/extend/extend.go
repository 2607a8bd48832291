// Package extend is the seam acemq's own packages (patterns, outbox) use to
// reach parts of the engine users must not: send options that carry values
// of their own, and reserved x-acemq- headers. Package acemq fills these in
// at init; the types are spelled any because this package cannot import it.
package extend

var (
	// NewSendOption returns an acemq.SendOption that stores value under key
	// for whoever reads the options (see SendValue) and, when reserved is
	// not nil, sets those reserved headers on the envelope. Reserved names
	// must start with "x-acemq-".
	NewSendOption func(key, value any, reserved map[string]any) any

	// SendValue looks key up in opts, a []acemq.SendOption; the last option
	// that set it wins.
	SendValue func(opts any, key any) (any, bool)

	// Reserved returns the reserved headers of e, an *acemq.Envelope, other
	// than the ones the envelope's fields stand for. The map is e's own;
	// writing to it (after creating it with create) changes what is rendered.
	Reserved func(e any, create bool) map[string]any
)

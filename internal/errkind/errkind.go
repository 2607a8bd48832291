// Package errkind lets two packages report one kind of error, each in its
// own words. Package transport and package acemq both declare ErrClosed:
// "transport: the connection is closed" is what a transport wraps, "acemq:
// the connection is closed" is what the root returns, and errors.Is holds
// between the two whichever a caller names, with no text read and no
// sentinel of one package carrying the other's prefix.
package errkind

// A Kind is a kind of error that more than one package reports.
type Kind struct{ name string }

// The kinds package transport declares and package acemq declares again.
var (
	Closed           = &Kind{"closed"}
	Unroutable       = &Kind{"unroutable"}
	Nacked           = &Kind{"nacked"}
	TopologyConflict = &Kind{"topology conflict"}
	NotFound         = &Kind{"not found"}
)

// Sentinel returns a sentinel error of kind k that reads text. Every
// sentinel of k is errors.Is every other, and no error of another kind.
func (k *Kind) Sentinel(text string) error { return &sentinel{text: text, kind: k} }

type sentinel struct {
	text string
	kind *Kind
}

func (e *sentinel) Error() string { return e.text }

// Is reports whether target is a sentinel of e's kind.
func (e *sentinel) Is(target error) bool {
	t, ok := target.(*sentinel)
	return ok && t.kind == e.kind
}

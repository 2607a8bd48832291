// Package errtext builds acemq's error texts: one "acemq: " prefix per
// message, at the front, however many acemq errors the message wraps.
package errtext

import (
	"fmt"
	"strings"
)

// Prefix begins every acemq error text.
const Prefix = "acemq: "

// Errorf is fmt.Errorf (with %w) whose text starts with Prefix once: the
// prefix is added when format lacks it, and the prefixes of the wrapped
// causes are dropped from the text. errors.Is and errors.As reach every
// cause as they would through fmt.Errorf.
func Errorf(format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	return &prefixed{text: Clean(err.Error()), err: err}
}

// Clean returns s with Prefix at its front and nowhere else where a cause
// began: after ": " or at the start of a line (errors.Join).
func Clean(s string) string {
	s = strings.TrimPrefix(s, Prefix)
	s = strings.ReplaceAll(s, ": "+Prefix, ": ")
	s = strings.ReplaceAll(s, "\n"+Prefix, "\n")
	return Prefix + s
}

// Bare is err's text without any acemq prefix, for a reason that quotes
// an error inside a sentence of its own.
func Bare(err error) string {
	return strings.TrimPrefix(Clean(err.Error()), Prefix)
}

type prefixed struct {
	text string
	err  error
}

func (e *prefixed) Error() string { return e.text }
func (e *prefixed) Unwrap() error { return e.err }

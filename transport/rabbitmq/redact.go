package rabbitmq

import (
	"github.com/acemq/acemq/internal/urls"
)

// Redact returns rawURL, one URL or a comma-separated list of them, with
// every password replaced by "xxxxx", so it can appear in an error, a log
// line or a health report. The user name stays; a URL without a password
// comes back unchanged, and one that does not parse is redacted by
// position. Redact never fails. It is the same function as acemq.Redact.
func Redact(rawURL string) string { return urls.Redact(rawURL) }

// scrubbed is an error whose text has the passwords removed; errors.Is and
// errors.As still reach the error it wraps.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// scrub removes every node's password, plain and URL-escaped, and any
// unredacted copy of a node's URL from err's text. A nil err stays nil.
func (t *Transport) scrub(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := urls.Scrub(msg, t.url)
	if clean == msg {
		return err
	}
	return &scrubbed{msg: clean, err: err}
}

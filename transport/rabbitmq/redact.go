package rabbitmq

import (
	"net/url"
	"strings"
)

// redacted replaces a password wherever the transport would show it.
const redacted = "xxxxx"

// Redact returns rawURL with its password replaced by "xxxxx", so the URL
// can appear in an error, a log line or a health report. A URL without a
// password comes back unchanged; one that does not parse is redacted by
// hand, taking everything between the user name's colon and the last '@'
// before the host as the password. Redact never fails.
func Redact(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		if u.User == nil {
			return rawURL
		}
		if _, ok := u.User.Password(); !ok {
			return rawURL
		}
		u.User = url.UserPassword(u.User.Username(), redacted)
		return u.String()
	}
	_, colon, at, ok := userinfoBounds(rawURL)
	if !ok || colon < 0 {
		return rawURL
	}
	return rawURL[:colon+1] + redacted + rawURL[at:]
}

// userinfoBounds finds the userinfo of a URL that may not parse: start is
// the index after "://", colon the index of the colon separating user from
// password (or -1), at the index of the '@' ending the userinfo.
func userinfoBounds(rawURL string) (start, colon, at int, ok bool) {
	i := strings.Index(rawURL, "://")
	if i < 0 {
		return 0, 0, 0, false
	}
	start = i + 3
	rest := rawURL[start:]
	// The authority ends at the first '/' after the last '@'; a password
	// may itself hold '/', '?' or '#', so search for the last '@' first.
	a := strings.LastIndex(rest, "@")
	if a < 0 {
		return 0, 0, 0, false
	}
	at = start + a
	colon = strings.IndexByte(rawURL[start:at], ':')
	if colon >= 0 {
		colon += start
	}
	return start, colon, at, true
}

// passwordOf returns the password in rawURL, decoded, or "" when it has none.
func passwordOf(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		if u.User == nil {
			return ""
		}
		p, _ := u.User.Password()
		return p
	}
	_, colon, at, ok := userinfoBounds(rawURL)
	if !ok || colon < 0 {
		return ""
	}
	p := rawURL[colon+1 : at]
	if d, err := url.PathUnescape(p); err == nil {
		return d
	}
	return p
}

// scrubbed is an error whose text has the password removed; errors.Is and
// errors.As still reach the error it wraps.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// scrub removes the transport's password, plain and URL-escaped, and any
// unredacted copy of the URL from err's text. A nil err stays nil.
func (t *Transport) scrub(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := strings.ReplaceAll(msg, t.url, t.safeURL)
	if t.password != "" {
		clean = strings.ReplaceAll(clean, t.password, redacted)
		if esc := url.QueryEscape(t.password); esc != t.password {
			clean = strings.ReplaceAll(clean, esc, redacted)
		}
		if esc := url.PathEscape(t.password); esc != t.password {
			clean = strings.ReplaceAll(clean, esc, redacted)
		}
	}
	if clean == msg {
		return err
	}
	return &scrubbed{msg: clean, err: err}
}

// Package urls reads the broker URLs acemq is given: a single URL or a
// comma-separated list of the nodes of one cluster. It is the one place
// that knows how to split such a list, where a password sits in it and how
// to hide it, so that every error, log line, health report and span shows
// the same redacted text.
package urls

import (
	"net/url"
	"strings"
)

// Redacted replaces a password wherever acemq shows a URL.
const Redacted = "xxxxx"

// Split cuts a comma-separated list into its entries, each trimmed of
// surrounding spaces. A comma starts a new entry only when what follows it
// (after spaces and further commas) begins with a scheme and "://", or is
// nothing at all, so
// a comma inside a password ("amqp://u:a,b@host/") does not split the URL
// it belongs to. A list without such a comma is one entry; an empty string
// is one empty entry.
func Split(list string) []string {
	var out []string
	start := 0
	for i := 0; i < len(list); i++ {
		if list[i] != ',' {
			continue
		}
		if next := strings.TrimLeft(list[i+1:], " \t,"); next == "" || hasScheme(next) {
			out = append(out, strings.TrimSpace(list[start:i]))
			start = i + 1
		}
	}
	return append(out, strings.TrimSpace(list[start:]))
}

// hasScheme reports whether s begins with an RFC 3986 scheme and "://".
func hasScheme(s string) bool {
	i := strings.Index(s, "://")
	if i < 1 {
		return false
	}
	for j := 0; j < i; j++ {
		c := s[j]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case j > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// Scheme returns the lower-cased scheme of one URL, or "" when it has no
// "scheme://" prefix.
func Scheme(raw string) string {
	if !hasScheme(raw) {
		return ""
	}
	return strings.ToLower(raw[:strings.Index(raw, "://")])
}

// Redact returns s, a URL or a list of them, with every password replaced
// by Redacted and everything else as it was: the user name stays, so an
// operator can tell which account failed. It never fails: an entry that
// does not parse is redacted by position (everything between the user
// name's colon and the last '@' of its authority), and the entries of a
// list are redacted one by one and joined again with commas.
func Redact(s string) string {
	entries := Split(s)
	if len(entries) == 1 {
		return redactOne(s)
	}
	for i, e := range entries {
		entries[i] = redactOne(e)
	}
	return strings.Join(entries, ",")
}

func redactOne(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil && hasScheme(raw) {
		if _, ok := u.User.Password(); !ok {
			return raw
		}
		u.User = url.UserPassword(u.User.Username(), Redacted)
		return u.String()
	}
	_, colon, at, ok := userinfo(raw)
	if !ok || colon < 0 {
		return raw
	}
	return raw[:colon+1] + Redacted + raw[at:]
}

// userinfo finds the userinfo of a URL that may not parse: start is the
// index after "://", colon the index of the colon between user and
// password (or -1), at the index of the '@' that ends the userinfo. A
// password may itself hold '/', '?' or '#', so the last '@' is taken.
func userinfo(raw string) (start, colon, at int, ok bool) {
	i := strings.Index(raw, "://")
	if i < 0 {
		return 0, 0, 0, false
	}
	start = i + 3
	a := strings.LastIndex(raw[start:], "@")
	if a < 0 {
		return 0, 0, 0, false
	}
	at = start + a
	colon = strings.IndexByte(raw[start:at], ':')
	if colon >= 0 {
		colon += start
	}
	return start, colon, at, true
}

// Password returns the password in one URL, decoded, or "" when it has
// none. It finds the password where Redact would hide it.
func Password(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil && hasScheme(raw) {
		p, _ := u.User.Password()
		return p
	}
	_, colon, at, ok := userinfo(raw)
	if !ok || colon < 0 {
		return ""
	}
	p := raw[colon+1 : at]
	if d, err := url.PathUnescape(p); err == nil {
		return d
	}
	return p
}

// Passwords returns the distinct non-empty passwords of a URL or list.
func Passwords(s string) []string {
	var out []string
	for _, e := range Split(s) {
		p := Password(e)
		if p == "" {
			continue
		}
		dup := false
		for _, have := range out {
			dup = dup || have == p
		}
		if !dup {
			out = append(out, p)
		}
	}
	return out
}

// Scrub removes every password of s (a URL or list), plain and escaped as
// a URL would carry it, and every unredacted copy of s's entries from msg.
func Scrub(msg, s string) string {
	for _, e := range Split(s) {
		if e != "" {
			msg = strings.ReplaceAll(msg, e, redactOne(e))
		}
	}
	for _, p := range Passwords(s) {
		msg = strings.ReplaceAll(msg, p, Redacted)
		if esc := url.QueryEscape(p); esc != p {
			msg = strings.ReplaceAll(msg, esc, Redacted)
		}
		if esc := url.PathEscape(p); esc != p {
			msg = strings.ReplaceAll(msg, esc, Redacted)
		}
	}
	return msg
}

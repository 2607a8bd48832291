package acemq_test

import (
	"strings"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// acemq.Redact and rabbitmq.Redact are one function: a URL that does not
// parse, a list, and the plain case come out alike, with no password.
func TestRedactIsOneFunction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want, password string }{
		{"amqp://user:pa%zz@host/", "amqp://user:xxxxx@host/", "pa%zz"},
		{"amqp://user:s3cret@host/", "amqp://user:xxxxx@host/", "s3cret"},
		{"amqp://a:b1@h1/,amqp://c:d%zz@h2/", "amqp://a:xxxxx@h1/,amqp://c:xxxxx@h2/", "d%zz"},
	} {
		got, other := acemq.Redact(tc.in), rabbitmq.Redact(tc.in)
		if got != tc.want || other != tc.want {
			t.Errorf("Redact(%q): acemq %q, rabbitmq %q, want %q", tc.in, got, other, tc.want)
		}
		if strings.Contains(got, tc.password) {
			t.Errorf("Redact(%q) = %q keeps the password", tc.in, got)
		}
	}
}

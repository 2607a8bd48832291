package acemq_test

import (
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// acemq.Redact and rabbitmq.Redact are one function: a URL that does not
// parse, a list, and the plain case come out alike, with no password (each
// want holds none, so equality proves it).
func TestRedactIsOneFunction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"amqp://user:pa%zz@host/", "amqp://user:xxxxx@host/"},
		{"amqp://user:s3cret@host/", "amqp://user:xxxxx@host/"},
		{"amqp://a:b1@h1/,amqp://c:d%zz@h2/", "amqp://a:xxxxx@h1/,amqp://c:xxxxx@h2/"},
	} {
		got, other := acemq.Redact(tc.in), rabbitmq.Redact(tc.in)
		if got != tc.want || other != tc.want {
			t.Errorf("Redact(%q): acemq %q, rabbitmq %q, want %q", tc.in, got, other, tc.want)
		}
	}
}

package console

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/outbox"
)

// Option configures Handler.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	auth   func(*http.Request) error
	token  bool // auth is Token's: it may set the cookie
	write  bool
	logger *slog.Logger
	queues []string
	checks map[string]func([]byte) error
	who    func(*http.Request) string
	outbox *outbox.Outbox
	cipher acemq.BodyCipher
}

// Auth gives the function that admits a request: it returns nil to serve
// it and an error (shown to the caller as 401 Unauthorized) to refuse it.
// Without Auth (the default) the console serves only requests whose
// remote address is a loopback one (127.0.0.0/8, ::1) and refuses every
// other with 403 Forbidden: a console mounted on a public mux by mistake
// shows nothing. A nil fn is the default.
func Auth(fn func(r *http.Request) error) Option {
	return optionFunc(func(c *config) { c.auth, c.token = fn, false })
}

// Token is an Auth that admits a request carrying token as a bearer token
// (Authorization: Bearer T), as the cookie the console sets, or once as the
// query parameter token (the link the CLI prints); the console then sets
// the cookie, HttpOnly and SameSite=Strict, so the page's own requests
// carry it. Tokens are compared in constant time. An empty token admits
// nothing.
func Token(token string) Option {
	return optionFunc(func(c *config) {
		c.token = true
		c.auth = func(r *http.Request) error {
			if token == "" {
				return errors.New("console: no token is configured")
			}
			if tokenOf(r) == "" {
				return errors.New("console: this console needs its token")
			}
			if subtle.ConstantTimeCompare([]byte(tokenOf(r)), []byte(token)) != 1 {
				return errors.New("console: wrong token")
			}
			return nil
		}
	})
}

// tokenCookie is the cookie Token's console sets once the token came in
// the query.
const tokenCookie = "acemq_console_token"

// tokenOf is the token r carries: its bearer token, else its cookie, else
// its query parameter.
func tokenOf(r *http.Request) string {
	if h, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return h
	}
	if ck, err := r.Cookie(tokenCookie); err == nil {
		return ck.Value
	}
	return r.URL.Query().Get("token")
}

// Write lets the console change queues: replay, edit and replay, discard
// and release a blocked key. Without it (the default) the console is
// read-only and refuses every action with 403 Forbidden.
func Write() Option {
	return optionFunc(func(c *config) { c.write = true })
}

// Logger gives the logger the console writes its audit lines to (who did
// what to which message); the default is slog.Default().
func Logger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
}

// Queues names the work queues whose families the overview shows, besides
// those of the consumers made on the Conn (AMQP cannot list queues). Each
// name is a work queue (orders), not one of its derived queues
// (orders.dlq); an ordered consumer's queue is shown with its partitions.
func Queues(names ...string) Option {
	return optionFunc(func(c *config) { c.queues = append(c.queues, names...) })
}

// Check registers how an edited body of messages of type typeName is
// checked before edit and replay sends it: fn decodes body as the
// application does and returns why it cannot. For a type with no Check, the
// console can only check that the body is valid JSON, and says so to the
// operator.
func Check(typeName string, fn func(body []byte) error) Option {
	return optionFunc(func(c *config) {
		if c.checks == nil {
			c.checks = map[string]func([]byte) error{}
		}
		c.checks[typeName] = fn
	})
}

// CheckJSON is Check with a decoder for T: the edited body must decode as
// a T by encoding/json with no field T lacks.
func CheckJSON[T any](typeName string) Option {
	return Check(typeName, func(body []byte) error {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		var v T
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("not a %s: %w", typeName, err)
		}
		return nil
	})
}

// Who gives the function that names the operator of a request in the
// audit header and log line of an edit, a discard or a release; the
// default is "console@" and the request's remote address.
func Who(fn func(r *http.Request) string) Option {
	return optionFunc(func(c *config) { c.who = fn })
}

// Cipher gives the cipher that opens sealed bodies (those a Conn given
// acemq.WithBodyCipher sent; package crypt's Keys is one) in the message
// view. Without it a sealed message shows the ID of its key and says that
// its body is encrypted, and shows none of its bytes. Either way the
// console does not seal: edit and replay refuses a sealed message (replay
// sends it on as it is).
func Cipher(c acemq.BodyCipher) Option {
	return optionFunc(func(cfg *config) { cfg.cipher = c })
}

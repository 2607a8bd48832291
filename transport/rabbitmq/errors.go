package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/transport"
)

// ErrBlocked is wrapped by the error of a publish whose ctx ended while
// the broker blocked publishing (a memory or disk alarm: connection.blocked).
// Such a publish may still be delivered: it may have been written before
// the block, and the broker takes it once the alarm clears.
var ErrBlocked = errors.New("rabbitmq: the broker blocks publishing")

// publishCtxError is ctxError for a publish: while the broker blocks the
// connection, the error says so, names the alarm and since when, and warns
// that the message may still be delivered.
func (t *Transport) publishCtxError(op string, ctx context.Context) error {
	err := ctxError(op, ctx)
	t.mu.Lock()
	s := t.sess
	t.mu.Unlock()
	if s == nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unblocked == nil {
		return err
	}
	return fmt.Errorf("%w (%s, since %s); the message may still be delivered once the alarm clears: %w",
		ErrBlocked, s.blockReason, stamp(s.blockedSince), err)
}

// ctxError reports that ctx ended while op waited; errors.Is matches
// ctx.Err() (context.Canceled or context.DeadlineExceeded).
func ctxError(op string, ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		err = context.Canceled
	}
	return fmt.Errorf("rabbitmq: %s: %w", op, err)
}

// amqpCode returns the reply code of the *amqp.Error in err's chain, or 0.
func amqpCode(err error) int {
	var e *amqp.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// isSoftError reports a channel-level refusal by the broker: the channel is
// closed but the connection lives, and sending the same again fails again.
func isSoftError(err error) bool {
	switch amqpCode(err) {
	case amqp.AccessRefused, amqp.NotFound, amqp.ResourceLocked, amqp.PreconditionFailed:
		return true
	}
	return false
}

// refusedWhatWasSent reports a connection the broker closed because of
// something the client sent: a frame it could not parse or did not expect,
// or an internal error (RabbitMQ 3.10's answer to a float it cannot read).
func refusedWhatWasSent(err error) bool {
	var e *amqp.Error
	if !errors.As(err, &e) || !e.Server {
		// amqp091 reports its own socket errors as 501 FRAME_ERROR too.
		return false
	}
	switch e.Code {
	case amqp.FrameError, amqp.SyntaxError, amqp.CommandInvalid, amqp.UnexpectedFrame, amqp.InternalError:
		return true
	}
	return false
}

// closedWhat names what a broker error closed: "connection" for a hard
// error, "channel" for a soft one.
func closedWhat(err error) string {
	if isSoftError(err) {
		return "channel"
	}
	return "connection"
}

// kindError returns an error that reads as the formatted message and wraps
// sentinel, one of transport's, and cause when it is not nil (errors.Is and
// errors.As find both). The message leaves the sentinel's own text out, so
// the error reads with this package's prefix alone: the message says more
// than the sentinel's "transport: …" would.
func kindError(sentinel, cause error, format string, args ...any) error {
	errs := []error{sentinel}
	if cause != nil {
		errs = append(errs, cause)
	}
	return &quiet{msg: fmt.Sprintf(format, args...), errs: errs}
}

// classify wraps a broker error met while doing op on name: a 404 with
// transport.ErrNotFound, a 406 with transport.ErrTopologyConflict. Both the
// sentinel and the *amqp.Error stay reachable through errors.Is/As; the
// text is the broker's, which says which it was.
func classify(op, kind, name string, err error) error {
	switch amqpCode(err) {
	case amqp.NotFound:
		return kindError(transport.ErrNotFound, err, "rabbitmq: %s %s %q: %v", op, kind, name, err)
	case amqp.PreconditionFailed:
		return kindError(transport.ErrTopologyConflict, err, "rabbitmq: %s %s %q: %v", op, kind, name, err)
	}
	return fmt.Errorf("rabbitmq: %s %s %q: %w", op, kind, name, err)
}

// names reports whether a broker error's text names the entity, as in
// "NOT_FOUND - no exchange 'orders' in vhost '/'".
func names(err error, name string) bool {
	var e *amqp.Error
	if !errors.As(err, &e) {
		return false
	}
	return strings.Contains(e.Reason, "'"+name+"'")
}

// stamp formats an instant for health and error texts.
func stamp(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}

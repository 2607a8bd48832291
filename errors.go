package acemq

import (
	"errors"

	"github.com/acemq/acemq/internal/errkind"
	"github.com/acemq/acemq/internal/ordering"
)

// The errors acemq reports with. Each is wrapped with detail; compare with
// errors.Is, never by text or with ==. ErrClosed, ErrUnroutable, ErrNacked,
// ErrTopologyConflict and ErrNotFound are this package's words for the
// sentinels of package transport of the same names: errors.Is holds
// between the two of a kind, either way, so an error a transport wraps
// transport.ErrNotFound in is errors.Is ErrNotFound.
var (
	// ErrClosed reports a call on a closed (or shutting down) Conn.
	ErrClosed = errkind.Closed.Sentinel("acemq: the connection is closed")
	// ErrPartitionLost is the cause (context.Cause) of an ordered
	// handler's ctx cancelled because this instance lost the delivery's
	// partition: its slot lease ended, its subscription went, or the
	// broker was not heard within the heartbeat timeout. Another instance
	// may be handling the delivery already; whatever the handler returns,
	// it goes back to its partition unsettled. A handler whose store
	// refused a write for a stale fence returns Retry with an error
	// wrapping it: the delivery goes back the same way and the partition
	// is taken again with a new fence. See Message.Fence.
	ErrPartitionLost = ordering.ErrLost
	// ErrUnroutable reports a publish that no queue took: every publish is
	// mandatory.
	ErrUnroutable = errkind.Unroutable.Sentinel("acemq: the message was unroutable")
	// ErrNacked reports a publish the broker refused.
	ErrNacked = errkind.Nacked.Sentinel("acemq: the broker nacked the message")
	// ErrTopologyConflict reports a declaration (by NewConsumer, NewRouter
	// or Declare) that contradicts what the broker has: a queue that exists
	// with other arguments, an exchange of another kind.
	ErrTopologyConflict = errkind.TopologyConflict.Sentinel("acemq: the declaration conflicts with the broker's")
	// ErrNotFound reports a queue or exchange that does not exist: a Bind to
	// a missing exchange, a NoDeclare consumer whose queues are missing.
	ErrNotFound = errkind.NotFound.Sentinel("acemq: not found")
	// ErrFatal marks an error no retry can fix; see Fatal.
	ErrFatal = errors.New("acemq: fatal")
	// ErrTooLarge is wrapped by the error of a Send, SendAll, Prepare or
	// PublishRaw whose body is over the Conn's WithMaxMessageSize.
	ErrTooLarge = errors.New("acemq: the message is too large")
)

// fatalError is an error marked by Fatal.
type fatalError struct{ err error }

func (e fatalError) Error() string {
	if e.err == nil {
		return "fatal error"
	}
	return e.err.Error()
}
func (e fatalError) Unwrap() []error { return []error{e.err, ErrFatal} }

// Fatal marks err as one no retry can fix: a handler returning it through
// AckOf, or asking Retry with it, has the delivery dead-lettered at once.
// errors.Is(Fatal(err), ErrFatal) holds, and so does errors.Is(.., err).
func Fatal(err error) error { return fatalError{err: err} }

// The errors Health wraps, so that a probe tells a deliberate pause from an
// outage with errors.Is rather than by reading text.
var (
	// ErrPaused reports a running Consumer or Router that Pause paused.
	ErrPaused = errors.New("acemq: paused")
	// ErrTripped reports a running Consumer or Router its kill switch
	// paused: its handler failed too often (KillSwitch), typically because
	// something it depends on is down.
	ErrTripped = errors.New("acemq: paused by the kill switch")
	// ErrUnavailable reports that the Conn's transport is not healthy: the
	// connection to the broker is down or blocked by it, or a consumer on it
	// is not consuming. The transport's error, wrapped, says which and
	// since when.
	ErrUnavailable = errors.New("acemq: the broker is unavailable")
	// ErrFaulted reports a Consumer or Router that cannot consume until
	// someone fixes it: its Run returned an error (its queue is missing,
	// say), or, for a Router, a route is invalid (a type routed twice) or
	// NewRouter failed. The error wrapping it wraps the cause too and says
	// since when. It does not wrap ErrUnavailable: the fault is this
	// process's consumer, not the broker, and a probe can tell them apart.
	ErrFaulted = errors.New("acemq: the consumer is faulted")
	// ErrNotRunning reports an essential Consumer or Router that nothing
	// runs: made, but its Run not called yet, or its Run returned (its ctx
	// ended). Nothing consumes its queue. A consumer stopped on purpose
	// is closed with Close, which takes it out of the report.
	ErrNotRunning = errors.New("acemq: the consumer is not running")
	// ErrStuck reports a running Consumer or Router one of whose handlers
	// has held a delivery longer than StuckAfter allows (15 minutes by
	// default): a handler that never returns keeps its delivery unacked,
	// and from RabbitMQ 4.3 no broker timeout takes it back on a classic
	// queue.
	ErrStuck = errors.New("acemq: a handler is stuck")
	// ErrConsumerClosed reports a Run of a Consumer or Router after its
	// Close: a closed consumer does not run again; make a new one.
	ErrConsumerClosed = errors.New("acemq: the consumer is closed")
)

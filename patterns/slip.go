package patterns

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq"
	"github.com/google/uuid"
)

// itineraryHeader carries a routing slip: the queues a message has still
// to visit, next first. It is in the engine's reserved namespace, so
// nothing sent through the API (an application header, an interceptor) can
// forge or drop it; a producer writing AMQP directly can, which is why a
// slip is for queues only trusted producers write to (docs/security.md).
const itineraryHeader = "x-acemq-itinerary"

// Itinerary attaches a routing slip to the message being sent: after the
// queue it is sent to, it visits steps in order, each step's handler
// wrapped by Forward passing it on to the next. Steps are queue names,
// reached through the default exchange. An empty step cannot be reached: the
// step before it rejects the message with a reason saying so.
//
//	pub := acemq.NewPublisher[Order](mq, "", "validate")
//	err := pub.Send(ctx, order, patterns.Itinerary("price", "ship"))
func Itinerary(steps ...string) acemq.SendOption {
	slip := make([]any, len(steps))
	for i, s := range steps {
		slip[i] = s
	}
	return acemq.ReservedHeader(itineraryHeader, slip)
}

// Forward passes a message on along its routing slip. After the handler
// returns Done, Forward publishes the message to the slip's next step with
// the slip advanced by one, and returns Done only once the broker confirmed
// it; a forward that fails is a Retry, so the step runs again (make it
// idempotent). A message whose slip is empty, or that has none, is simply
// acked: it has arrived. Any other Ack is returned as it is and nothing is
// forwarded.
//
// What is forwarded is m.Payload, re-encoded with the Conn's codec after
// the handler ran, so a step may enrich the message by changing m.Payload
// (the usual reason for a routing slip). The forwarded message keeps the
// Type, Version and application headers of the one handled; it gets an ID
// derived from the handled one's ID and the next step, so a step that runs
// twice forwards the same ID twice and an idempotent next step runs once.
// Its CorrelationID and CausationID link it to the message handled. The
// publish runs the Conn's publish chain, as any Send does.
//
// With WithIdempotency, put the guard outside Forward (earlier in Chain):
// inside it, a retry after a failed forward would meet Duplicate, skip the
// handler, and forward the payload without the step's changes.
func Forward[T any](c *acemq.Conn) acemq.Middleware[T] {
	return func(next acemq.Handler[T]) acemq.Handler[T] {
		return func(ctx context.Context, m *acemq.Message[T]) acemq.Ack {
			ack := next(ctx, m)
			if ack.String() != "done" {
				return ack
			}
			slip, err := readSlip(m.Envelope)
			if err != nil {
				return acemq.Reject(err)
			}
			if len(slip) == 0 {
				return ack
			}
			if c == nil {
				return acemq.Retry(errors.New("patterns: Forward was given a nil Conn"))
			}
			if err := forward(ctx, c, m, slip[0], slip[1:]); err != nil {
				return acemq.Retry(fmt.Errorf("patterns: forwarding message %s to the next step %q: %w", m.Envelope.ID, slip[0], err))
			}
			return ack
		}
	}
}

func forward[T any](ctx context.Context, c *acemq.Conn, m *acemq.Message[T], step string, rest []string) error {
	env := m.Envelope
	opts := make([]acemq.SendOption, 0, len(env.Headers)+2)
	opts = append(opts,
		acemq.MessageID(uuid.NewSHA1(uuid.NameSpaceOID, []byte(env.ID+"\x00"+step)).String()),
		Itinerary(rest...))
	for k, v := range env.Headers {
		opts = append(opts, acemq.Header(k, v))
	}
	var popts []acemq.PublisherOption
	if env.Type != "" {
		popts = append(popts, acemq.TypeName(env.Type))
	}
	popts = append(popts, acemq.SchemaVersion(env.Version))
	return acemq.NewPublisher[T](c, "", step, popts...).Send(ctx, m.Payload, opts...)
}

// Steps returns the routing slip env carries: the queues it has still to
// visit after the one it is on, next first. It is nil when there is none.
func Steps(env *acemq.Envelope) []string {
	steps, _ := readSlip(env)
	return steps
}

// readSlip reads the slip; a header of the wrong shape is an error, since
// the route it meant is lost.
func readSlip(env *acemq.Envelope) ([]string, error) {
	if env == nil {
		return nil, nil
	}
	v, ok := env.Reserved()[itineraryHeader]
	if !ok || v == nil {
		return nil, nil
	}
	bad := func() error {
		return fmt.Errorf("patterns: the routing slip of message %s is unreadable: header %s is %T, want a list of queue names", env.ID, itineraryHeader, v)
	}
	var out []string
	switch list := v.(type) {
	case []string:
		out = list
	case []any:
		out = make([]string, 0, len(list))
		for _, e := range list {
			switch s := e.(type) {
			case string:
				out = append(out, s)
			case []byte:
				out = append(out, string(s))
			default:
				return nil, bad()
			}
		}
	default:
		return nil, bad()
	}
	for i, s := range out {
		if s == "" {
			return nil, fmt.Errorf("patterns: the routing slip of message %s has an empty step (step %d of %q)", env.ID, i+1, out)
		}
	}
	return out, nil
}

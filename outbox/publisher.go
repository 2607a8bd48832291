package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq"
)

// Publisher writes messages of type T into an Outbox, in the caller's
// transaction, for a Relay to publish to one exchange and routing key. It
// is safe for concurrent use.
type Publisher[T any] struct {
	o      *Outbox
	pub    *acemq.Publisher[T]
	insert string
}

// NewPublisher returns a Publisher of T to exchange with routingKey through
// o. The options are acemq's publisher options (TypeName, SchemaVersion,
// ContentType). A nil o or c makes every Send fail.
func NewPublisher[T any](o *Outbox, c *acemq.Conn, exchange, routingKey string, opts ...acemq.PublisherOption) *Publisher[T] {
	p := &Publisher[T]{o: o}
	if o == nil || c == nil {
		return p
	}
	p.pub = acemq.NewPublisher[T](c, exchange, routingKey, opts...)
	// due_at is the later of At's time (the epoch without At) and the
	// database's clock, plus After's delay: due and lease times all come
	// from the database's clock.
	d := o.dialect
	p.insert = d.sql(fmt.Sprintf(`INSERT INTO %s
	(message_id, exchange, routing_key, headers, body, content_type, due_at, attempts, created_at)
	VALUES (?, ?, ?, ?, ?, ?, %s, 0, %s)`, o.table, d.later(d.greatest("?", d.now())), d.now()))
	return p
}

// Send runs the Conn's publish chain and codec on v now, as
// acemq.Publisher.Send would (interceptors see ctx, so a trace context or a
// tenant in it is stamped now), and inserts the resulting envelope and body
// into the outbox within tx. Nothing is published until tx commits and a
// Relay picks the row up; a rolled-back tx publishes nothing.
//
// At and After schedule the row; without them it is due at once. A publish
// interceptor's refusal is returned as it is, and no row is written.
func (p *Publisher[T]) Send(ctx context.Context, tx *sql.Tx, v T, opts ...acemq.SendOption) error {
	switch {
	case p == nil || p.o == nil:
		return errors.New("outbox: Send on a Publisher without an Outbox")
	case p.pub == nil:
		return fmt.Errorf("outbox: Send to table %s on a Publisher without a Conn", p.o.table)
	case tx == nil:
		return fmt.Errorf("outbox: Send to table %s was given a nil *sql.Tx", p.o.table)
	}
	at, after, err := dueAt(opts)
	if err != nil {
		return err
	}
	m, err := p.pub.Prepare(ctx, v, opts...)
	if err != nil {
		return err // a refusal stays the interceptor's very error value
	}
	if err := checkMessage(m); err != nil {
		return err
	}
	env, err := marshalEnvelope(m.Envelope)
	if err != nil {
		return err
	}
	d := p.o.dialect
	_, err = tx.ExecContext(ctx, p.insert,
		m.Envelope.ID, m.Exchange, m.RoutingKey, env, nonNil(m.Body), m.ContentType,
		d.timeArg(at), after.Microseconds())
	if err != nil {
		return fmt.Errorf("outbox: inserting message %q into %s: %w", m.Envelope.ID, p.o.table, err)
	}
	return nil
}

// scheduleKey is the key under which At and After carry when a row is due.
var scheduleKey = acemq.NewSendKey[schedule]("outbox schedule")

// schedule is At's time or After's delay.
type schedule struct {
	at    time.Time
	after time.Duration
	isAt  bool
}

// At schedules a message written by an outbox Publisher: the Relay
// publishes it at t or soon after, never before. A t in the past means at
// once. A plain acemq.Publisher ignores the option and sends at once. When
// several of At and After are given, the last one counts.
func At(t time.Time) acemq.SendOption {
	return scheduleKey.Option(schedule{at: t, isAt: true})
}

// After schedules a message written by an outbox Publisher to be
// published d after Send, never before; d <= 0 means at once. A plain
// acemq.Publisher ignores the option and sends at once.
func After(d time.Duration) acemq.SendOption {
	return scheduleKey.Option(schedule{after: d})
}

// latest is the latest time At accepts: the end of year 9999, which both
// dialects' time columns and RFC 3339 can hold.
var latest = time.Date(9999, time.December, 31, 23, 59, 59, 0, time.UTC)

// dueAt returns what makes a row written with opts due: a time it may not
// go before (the epoch when none was given) and a delay after the later of
// that time and the database's clock.
func dueAt(opts []acemq.SendOption) (time.Time, time.Duration, error) {
	epoch := time.Unix(0, 0)
	s, ok := scheduleKey.Value(opts)
	if !ok {
		return epoch, 0, nil
	}
	if !s.isAt {
		return epoch, max(0, s.after), nil
	}
	switch {
	case s.at.IsZero():
		return time.Time{}, 0, fmt.Errorf("%w: At was given the zero time", ErrInvalid)
	case s.at.After(latest):
		return time.Time{}, 0, fmt.Errorf("%w: At was given %s, after the year 9999", ErrInvalid, s.at.UTC().Format(time.RFC3339))
	case s.at.Before(epoch):
		return epoch, 0, nil // in the past: at once
	}
	return s.at, 0, nil
}

package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/transport"
)

var (
	_ transport.Leaser           = (*Transport)(nil)
	_ transport.HandOverConsumer = (*Transport)(nil)
)

// lease is an exclusive queue the transport declared on one connection.
// The broker deletes it with that connection and refuses it to any other
// while it lives. t.ord.mu guards ended.
type lease struct {
	t     *Transport
	name  string
	s     *session      // the connection that holds it
	lost  chan struct{} // closed when it ends without Release
	ended bool
}

// Lease takes the lease name on the current connection: it declares an
// exclusive, non-durable queue of that name on a channel of its own, closed
// right after. The queue is not remembered with Declare's topology, so a
// reconnection never declares it again: when the connection is lost (or the
// transport closes) the broker deletes the queue and Lost is closed, and
// the holder decides whether to take it again. A queue of that name held
// by another connection fails with an error wrapping transport.ErrLocked
// and the broker's 405 RESOURCE_LOCKED (it closes only that side channel);
// so does a lease this transport holds already, so that two parts of one
// program sharing a connection cannot both hold it. Release deletes the
// queue.
func (t *Transport) Lease(ctx context.Context, name string) (transport.Lease, error) {
	op := fmt.Sprintf("lease %q", name)
	if name == "" {
		return nil, errors.New("rabbitmq: lease: a lease needs a name")
	}
	s, err := t.current(ctx, op)
	if err != nil {
		return nil, err
	}
	l := &lease{t: t, name: name, s: s, lost: make(chan struct{})}
	if !t.claim(l) {
		return nil, kindError(transport.ErrLocked, nil, "rabbitmq: %s: this transport holds the lease already", op)
	}
	err = t.withSession(ctx, s, op, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(name, false, false, true, false, nil)
		return err
	})
	if err != nil {
		t.unclaim(l)
		if amqpCode(err) == amqp.ResourceLocked {
			return nil, kindError(transport.ErrLocked, err, "rabbitmq: %s: held by another connection: %v", op, err)
		}
		return nil, fmt.Errorf("rabbitmq: %s: %w", op, err)
	}
	// The connection may have died between the declaration and the claim
	// taking effect: the lease ended with it.
	select {
	case <-s.done:
		t.endLeases(s)
	default:
	}
	return l, nil
}

// claim records l as held unless a live lease of its name is.
func (t *Transport) claim(l *lease) bool {
	t.ord.mu.Lock()
	defer t.ord.mu.Unlock()
	if _, ok := t.ord.leases[l.name]; ok {
		return false
	}
	if t.ord.leases == nil {
		t.ord.leases = make(map[string]*lease)
	}
	t.ord.leases[l.name] = l
	return true
}

// unclaim forgets l, which was never taken.
func (t *Transport) unclaim(l *lease) {
	t.ord.mu.Lock()
	defer t.ord.mu.Unlock()
	if t.ord.leases[l.name] == l {
		delete(t.ord.leases, l.name)
	}
	l.ended = true
}

// endLeases ends, as lost, every lease held on s (on every session when s
// is nil): s's connection is gone, or the transport closes.
func (t *Transport) endLeases(s *session) {
	t.ord.mu.Lock()
	defer t.ord.mu.Unlock()
	for name, l := range t.ord.leases {
		if s == nil || l.s == s {
			delete(t.ord.leases, name)
			if !l.ended {
				l.ended = true
				close(l.lost)
			}
		}
	}
}

// withSession runs fn on a fresh channel of s, closed after; it fails at
// once, rather than waiting for another connection, when s is gone.
func (t *Transport) withSession(ctx context.Context, s *session, op string, fn func(*amqp.Channel) error) error {
	if ctx.Err() != nil {
		return ctxError(op, ctx)
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("the connection is gone: %w", t.scrub(err))
	}
	return runOnChannel(ctx, op, ch, fn)
}

// Lost is closed once the lease ended without Release: its connection is
// gone or the transport closed.
func (l *lease) Lost() <-chan struct{} { return l.lost }

// Release deletes the lease's queue, so that any connection may take it.
// It is idempotent, and does nothing once the lease is lost.
func (l *lease) Release(ctx context.Context) error {
	t := l.t
	t.ord.mu.Lock()
	if l.ended {
		t.ord.mu.Unlock()
		return nil
	}
	l.ended = true
	if t.ord.leases[l.name] == l {
		delete(t.ord.leases, l.name)
	}
	t.ord.mu.Unlock()
	err := t.withSession(ctx, l.s, fmt.Sprintf("release lease %q", l.name), func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(l.name, false, false, false)
		return err
	})
	select {
	case <-l.s.done:
		return nil // gone with its connection
	default:
	}
	if err != nil {
		// The queue outlives the call; this connection still holds it, and
		// a later Lease of the name on it takes it again.
		return fmt.Errorf("rabbitmq: release lease %q: %w", l.name, err)
	}
	return nil
}

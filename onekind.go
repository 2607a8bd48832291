package acemq

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq/transport"
)

// One name, one kind: a queue name is a plain queue (its producers publish
// to it through the default exchange) or an ordered one (an exchange of
// that name hashing keys into {name}.p0 ...), never both. A consumer of the
// other kind on a name the broker already has would declare its own
// topology beside the existing one and strand it: the plain queue's
// messages, or the ordered queue's publishers, reach nobody. So the engine
// checks before it declares (and, with NoDeclare, before it looks for its
// ladder), by the queues alone, as acemq replay tells the kinds apart
// (patterns.OrderedTarget): a queue named name is plain, whatever else
// exists; {name}.p0 without it is ordered. The exchange is not looked at:
// a transport can only say that an exchange exists, not its kind, and a
// plain queue often has an exchange of its own name.

// checkKind fails when the broker has the engine's queue name as the other
// kind: a plain queue of the name for an Ordered engine, an ordered
// queue's first partition (and no plain queue) for any other (each mode's
// checkKind). Each error says what exists and how to migrate.
func (e *engine) checkKind(ctx context.Context) error { return e.mode.checkKind(ctx) }

// checkKind, for an ordered engine, fails when the broker has a plain
// queue of the name.
func (m *orderedMode) checkKind(ctx context.Context) error {
	e := m.e
	found, err := e.queueExists(ctx, e.queue)
	if err != nil || !found {
		return err
	}
	return fmt.Errorf("acemq: ordered %s of %q: the broker has a plain queue %q, which its producers reach through the default exchange; an ordered queue of that name would strand it and its messages. "+
		"To migrate, stop its consumers, start the ordered one on another name, move the messages there (acemq replay %s NEW) and delete %q (docs/ordering.md, \"Migrating a plain queue to ordered\")",
		e.who, e.queue, e.queue, e.queue, e.queue)
}

// checkKind, for a plain (or batch) engine, fails when the broker has the
// name as an ordered queue: its first partition and no plain queue.
func (m plainMode) checkKind(ctx context.Context) error {
	e := m.e
	first := PartitionQueue(e.queue, 0)
	found, err := e.queueExists(ctx, first)
	if err != nil || !found {
		return err
	}
	if plain, err := e.queueExists(ctx, e.queue); err != nil || plain {
		return err
	}
	return fmt.Errorf("acemq: %s of %q: the broker has %q as an ordered queue (an exchange %q hashing keys into its partitions %s ...), and no plain queue of that name; a plain queue declared beside it would get none of the messages its publishers send to the exchange. "+
		"Consume it with Ordered, or give the plain consumer another name (docs/ordering.md, \"Migrating a plain queue to ordered\")",
		e.who, e.queue, e.queue, e.queue, first)
}

// queueExists looks, passively, for the queue name.
func (e *engine) queueExists(ctx context.Context, name string) (bool, error) {
	_, err := e.conn.t.Inspect(ctx, name)
	switch {
	case errors.Is(err, transport.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("acemq: %s%s of %q: looking for queue %q: %w", e.mode.label(), e.who, e.queue, name, err)
	}
	return true, nil
}

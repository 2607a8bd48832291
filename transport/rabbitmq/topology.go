package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/acemq/acemq/internal/wire"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/transport"
)

// withChannel runs fn on a fresh channel of the live connection and closes
// it after. A fresh channel per call keeps a broker refusal (which closes
// the channel) from touching anything else. ctx bounds the wait for the
// connection and, by closing the channel under it, every call fn makes.
func (t *Transport) withChannel(ctx context.Context, op string, fn func(*amqp.Channel) error) error {
	for {
		if ctx.Err() != nil {
			// Ended already: touch nothing, rather than race the close
			// below with the first of fn's calls.
			return ctxError(op, ctx)
		}
		s, err := t.current(ctx, op)
		if err != nil {
			return err
		}
		ch, err := s.conn.Channel()
		if err != nil {
			// The connection died under us: wait for the next one.
			select {
			case <-s.done:
				continue
			case <-ctx.Done():
				return ctxError(op, ctx)
			case <-t.closing:
				return errClosed(op)
			}
		}
		return runOnChannel(ctx, op, ch, fn)
	}
}

// runOnChannel runs fn on ch and closes ch after; ctx ending closes ch
// under fn's calls, and an error they then return is joined with ctx's.
func runOnChannel(ctx context.Context, op string, ch *amqp.Channel, fn func(*amqp.Channel) error) error {
	stop := context.AfterFunc(ctx, func() { _ = ch.Close() })
	err := fn(ch)
	if !stop() && err != nil {
		return errors.Join(ctxError(op, ctx), err)
	}
	_ = ch.Close()
	return err
}

// redeclareWait bounds each declaration of the topology on a new
// connection; one the broker has not answered by then is skipped, as a
// refused one is. RabbitMQ 4.3 answers a declaration of a durable classic
// queue whose node is down only once that node is back, and a channel
// close waits behind it.
const redeclareWait = 5 * time.Second

// declareBounded is declareOne on ch, given up after d. A declaration
// given up leaves ch to its goroutine, which closes it once the broker
// answers or the connection goes; the caller takes a fresh channel.
func declareBounded(ch *amqp.Channel, it transport.Topology, d time.Duration) (abandoned bool, err error) {
	done := make(chan error, 1) // room for the answer nobody may read
	go func() { done <- declareOne(ch, it) }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-done:
		return false, err
	case <-timer.C:
	}
	// Closing ch may wait behind the declaration, so it is not waited for.
	go func() { _ = ch.Close() }()
	return true, fmt.Errorf("rabbitmq: declare %s: no answer from the broker within %v", wire.Describe(it), d)
}

// Declare creates exchanges, queues and bindings, durable, in the order
// given, and remembers them so that every later connection declares them
// again, in the same order, before anything is published or consumed on
// it. A declaration that contradicts the broker's (a queue with other
// arguments, say) fails wrapping transport.ErrTopologyConflict and the
// broker's *amqp091.Error, naming the entity; one naming a missing exchange
// or queue fails wrapping transport.ErrNotFound.
func (t *Transport) Declare(ctx context.Context, items ...transport.Topology) error {
	for _, it := range items {
		if err := validate(it); err != nil {
			return err
		}
	}
	if len(items) == 0 {
		return nil
	}
	for _, it := range items {
		if x, ok := it.(transport.Exchange); ok {
			if err := t.checkPluginKind(ctx, x); err != nil {
				return err
			}
		}
	}
	return t.withChannel(ctx, "declare", func(ch *amqp.Channel) error {
		for _, it := range items {
			if err := declareOne(ch, it); err != nil {
				var broker *amqp.Error
				if q, ok := it.(transport.Queue); ok && q.Quorum && errors.As(err, &broker) && broker.Code == amqp.PreconditionFailed && t.isClassic(ctx, q) {
					// The broker's text names some other argument, which would
					// mislead: it stays reachable with errors.As, not shown.
					return &quiet{msg: fmt.Sprintf("rabbitmq: queue %q exists as a classic queue and is declared as a quorum queue; "+
						"a queue's type cannot change in place: move its messages to a new quorum queue (acemq replay), delete it, "+
						"and declare it again (docs/cluster.md, \"Moving to quorum queues\")", q.Name),
						errs: []error{transport.ErrTopologyConflict, broker}}
				}
				return err
			}
			t.record(it)
		}
		return nil
	})
}

// quiet is an error whose text is msg alone, with errs reachable through
// errors.Is and errors.As.
type quiet struct {
	msg  string
	errs []error
}

func (e *quiet) Error() string   { return e.msg }
func (e *quiet) Unwrap() []error { return e.errs }

// quorumOnly are the arguments that only a quorum queue takes.
var quorumOnly = []string{"x-queue-type", "x-delivery-limit", "x-dead-letter-strategy", "x-overflow", "x-quorum-initial-group-size"}

// isClassic reports whether q, whose declaration as a quorum queue the
// broker refused, exists as a classic queue. The broker names only the
// first argument that differs, which is seldom x-queue-type, so each probe
// declares q as a classic queue on a channel of its own: with q's other
// arguments, then with none. The broker checks x-queue-type, so a probe
// succeeds only against a classic queue, and then changes nothing.
func (t *Transport) isClassic(ctx context.Context, q transport.Queue) bool {
	same := make(map[string]any, len(q.Args))
	for k, v := range q.Args {
		if !slices.Contains(quorumOnly, k) {
			same[k] = v
		}
	}
	probes := []map[string]any{same}
	if len(same) > 0 {
		probes = append(probes, nil)
	}
	for _, args := range probes {
		table, err := wire.ToTable(args)
		if err != nil {
			return false // q.Args passed validate, so this does not happen
		}
		if table == nil {
			table = amqp.Table{}
		}
		table["x-queue-type"] = amqp.QueueTypeClassic
		err = t.withChannel(ctx, "declare", func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(q.Name, true, false, false, false, table)
			return err
		})
		if err == nil {
			return true
		}
	}
	return false
}

// impliedType reports whether q is a classic queue whose type the
// transport names itself (x-queue-type: classic), rather than its caller.
func impliedType(q transport.Queue) bool {
	_, named := q.Args["x-queue-type"]
	return !q.Quorum && !named
}

// validate refuses what the broker would refuse or mangle (internal/wire
// holds those rules for both transports), and what this transport cannot
// declare.
func validate(it transport.Topology) error {
	if err := wire.CheckTopology(it); err != nil {
		return fmt.Errorf("rabbitmq: declare %s: %w", wire.Describe(it), err)
	}
	switch v := it.(type) {
	case transport.Exchange:
		switch v.Kind {
		case "", "direct", "topic", "fanout", "headers", kindConsistentHash:
		default:
			return fmt.Errorf("rabbitmq: declare exchange %q: unknown kind %q (want direct, topic, fanout, headers or x-consistent-hash)", v.Name, v.Kind)
		}
		for k, a := range v.Args {
			// CheckTopology above checked every value. The plugin reads
			// these as strings and fails the whole connection
			// (INTERNAL_ERROR) on anything else.
			if _, ok := a.(string); !ok && v.Kind == kindConsistentHash && (k == "hash-header" || k == "hash-property") {
				return fmt.Errorf("rabbitmq: declare exchange %q: argument %s is %v (%T), want a string", v.Name, k, a, a)
			}
		}
	case transport.Queue:
		if v.Name == "" {
			return errors.New("rabbitmq: declare queue: the queue has no name")
		}
		if v.Quorum && v.Transient {
			return fmt.Errorf("rabbitmq: declare queue %q: a quorum queue is always durable; give Quorum or Transient, not both", v.Name)
		}
	case transport.Binding:
		if v.Queue == "" {
			return fmt.Errorf("rabbitmq: declare binding of exchange %q: the binding names no queue", v.Exchange)
		}
	case transport.ExchangeBinding:
		if v.Source == "" || v.Destination == "" {
			return fmt.Errorf("rabbitmq: declare binding of exchange %q to exchange %q: the default exchange cannot be bound", v.Destination, v.Source)
		}
	case nil:
		return errors.New("rabbitmq: declare: a topology item is nil")
	default:
		return fmt.Errorf("rabbitmq: declare: unknown topology item %T", it)
	}
	return nil
}

// declareOne declares it on ch. Every queue names its type
// (x-queue-type), so that a vhost whose default queue type is quorum does
// not turn a retry tier or a transient queue into a quorum queue. A queue
// declared without a type before is classic in a vhost of the default
// kind, and RabbitMQ takes the typed declaration as the same; in a vhost
// whose default is quorum it is a quorum queue, and the declaration
// conflicts (docs/rabbitmq.md, "Queue types").
func declareOne(ch *amqp.Channel, it transport.Topology) error {
	switch v := it.(type) {
	case transport.Exchange:
		if v.Name == "" {
			return nil // the default exchange always exists
		}
		kind := v.Kind
		if kind == "" {
			kind = amqp.ExchangeDirect
		}
		args, err := wire.ToTable(v.Args)
		if err != nil { // validate refuses these first: this is a safety net
			return fmt.Errorf("rabbitmq: declare exchange %q: arguments: %w", v.Name, err)
		}
		if err := ch.ExchangeDeclare(v.Name, kind, true, false, false, false, args); err != nil {
			return classify("declare", "exchange", v.Name, err)
		}
	case transport.Queue:
		args, err := wire.ToTable(v.Args)
		if err != nil { // validate refuses these first: this is a safety net
			return fmt.Errorf("rabbitmq: declare queue %q: arguments: %w", v.Name, err)
		}
		switch {
		case v.Quorum:
			if args == nil {
				args = amqp.Table{}
			}
			args["x-queue-type"] = amqp.QueueTypeQuorum
		case impliedType(v):
			if args == nil {
				args = amqp.Table{}
			}
			args["x-queue-type"] = amqp.QueueTypeClassic
		}
		if _, err := ch.QueueDeclare(v.Name, !v.Transient, false, false, false, args); err != nil {
			return classify("declare", "queue", v.Name, err)
		}
	case transport.Binding:
		if err := ch.QueueBind(v.Queue, v.Key, v.Exchange, false, nil); err != nil {
			return classify("declare", "binding to queue", v.Queue, fmt.Errorf("from exchange %q, key %q: %w", v.Exchange, v.Key, err))
		}
	case transport.ExchangeBinding:
		if err := ch.ExchangeBind(v.Destination, v.Key, v.Source, false, nil); err != nil {
			return classify("declare", "binding to exchange", v.Destination, fmt.Errorf("from exchange %q, key %q: %w", v.Source, v.Key, err))
		}
	}
	return nil
}

// record adds it to the remembered topology unless already there; a queue
// or exchange declared again replaces its earlier entry in place.
func (t *Transport) record(it transport.Topology) {
	switch v := it.(type) {
	case transport.Queue:
		v.Args = maps.Clone(v.Args)
		it = v
	case transport.Exchange:
		v.Args = maps.Clone(v.Args)
		it = v
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, have := range t.topo {
		if sameEntity(have, it) {
			t.topo[i] = it
			return
		}
	}
	t.topo = append(t.topo, it)
}

// sameEntity reports whether a and b declare the same queue, exchange or
// binding (queues and exchanges by name, whatever their arguments).
func sameEntity(a, b transport.Topology) bool {
	switch x := a.(type) {
	case transport.Queue:
		y, ok := b.(transport.Queue)
		return ok && x.Name == y.Name
	case transport.Exchange:
		y, ok := b.(transport.Exchange)
		return ok && x.Name == y.Name
	case transport.Binding:
		y, ok := b.(transport.Binding)
		return ok && x == y
	case transport.ExchangeBinding:
		y, ok := b.(transport.ExchangeBinding)
		return ok && x == y
	}
	return false
}

// forget drops a deleted queue and its bindings from the remembered topology.
func (t *Transport) forget(queue string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := t.topo[:0]
	for _, it := range t.topo {
		switch v := it.(type) {
		case transport.Queue:
			if v.Name == queue {
				continue
			}
		case transport.Binding:
			if v.Queue == queue {
				continue
			}
		}
		kept = append(kept, it)
	}
	clear(t.topo[len(kept):])
	t.topo = kept
}

// redeclare declares the remembered topology on a new session. A refused
// item is logged and skipped (its channel is replaced); only a dead
// connection fails the session.
func (t *Transport) redeclare(ctx context.Context, s *session) error {
	t.mu.Lock()
	items := append([]transport.Topology(nil), t.topo...)
	t.mu.Unlock()
	if len(items) == 0 {
		return nil
	}
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			_ = ch.Close()
		}
	}()
	for _, it := range items {
		if ch == nil {
			c, err := s.conn.Channel()
			if err != nil {
				return fmt.Errorf("rabbitmq: declaring the topology again: %w", t.scrub(err))
			}
			ch = c
		}
		if x, ok := it.(transport.Exchange); ok && pluginKinds[x.Kind] != "" {
			// Declared before, so it exists unless the broker lost it: a
			// passive look cannot cost the connection the way a declaration
			// does should the plugin have been disabled meanwhile.
			if err := ch.ExchangeDeclarePassive(x.Name, x.Kind, true, false, false, false, nil); err == nil {
				continue
			}
			_ = ch.Close()
			c, err := s.conn.Channel()
			if err != nil {
				ch = nil
				return fmt.Errorf("rabbitmq: declaring the topology again: %w", t.scrub(err))
			}
			ch = c
		}
		if abandoned, err := declareBounded(ch, it, redeclareWait); err != nil {
			if ctx.Err() != nil || s.conn.IsClosed() {
				return fmt.Errorf("rabbitmq: declaring the topology again: %w", t.scrub(err))
			}
			t.log.Error("acemq: rabbitmq topology not declared again", "error", err)
			if !abandoned {
				_ = ch.Close()
			}
			ch = nil
		}
	}
	return nil
}

// Inspect reports queue's ready messages and consumers through a passive
// declaration; a missing queue fails wrapping transport.ErrNotFound.
func (t *Transport) Inspect(ctx context.Context, queue string) (transport.QueueInfo, error) {
	var info transport.QueueInfo
	err := t.withChannel(ctx, fmt.Sprintf("inspect queue %q", queue), func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return classify("inspect", "queue", queue, err)
		}
		info = transport.QueueInfo{Name: q.Name, Messages: q.Messages, Consumers: q.Consumers}
		return nil
	})
	return info, err
}

// DeleteQueue deletes queue and the messages in it, and forgets it so it
// is not declared again after a reconnection. A missing queue is not an
// error.
func (t *Transport) DeleteQueue(ctx context.Context, queue string) error {
	err := t.withChannel(ctx, fmt.Sprintf("delete queue %q", queue), func(ch *amqp.Channel) error {
		if _, err := ch.QueueDelete(queue, false, false, false); err != nil && amqpCode(err) != amqp.NotFound {
			return classify("delete", "queue", queue, err)
		}
		return nil
	})
	if err == nil {
		t.forget(queue)
	}
	return err
}

// DeleteExchange deletes exchange and its bindings, and forgets it so it is
// not declared again after a reconnection. A missing exchange is not an
// error.
func (t *Transport) DeleteExchange(ctx context.Context, exchange string) error {
	err := t.withChannel(ctx, fmt.Sprintf("delete exchange %q", exchange), func(ch *amqp.Channel) error {
		if err := ch.ExchangeDelete(exchange, false, false); err != nil && amqpCode(err) != amqp.NotFound {
			return classify("delete", "exchange", exchange, err)
		}
		return nil
	})
	if err == nil {
		t.forgetExchange(exchange)
	}
	return err
}

// forgetExchange drops a deleted exchange and the bindings from or to it
// from the remembered topology.
func (t *Transport) forgetExchange(exchange string) {
	t.exchanges.forget(exchange)
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := t.topo[:0]
	for _, it := range t.topo {
		switch v := it.(type) {
		case transport.Exchange:
			if v.Name == exchange {
				continue
			}
		case transport.Binding:
			if v.Exchange == exchange {
				continue
			}
		case transport.ExchangeBinding:
			if v.Source == exchange || v.Destination == exchange {
				continue
			}
		}
		kept = append(kept, it)
	}
	clear(t.topo[len(kept):])
	t.topo = kept
}

package memory

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq/internal/wire"
	"github.com/acemq/acemq/transport"
)

// queueDecl is a queue declaration, validated, with the arguments the broker
// acts on picked out of Args.
type queueDecl struct {
	quorum bool
	args   map[string]any // as declared, copied

	hasTTL        bool
	ttl           time.Duration
	hasDLX        bool
	dlx           string
	hasDLRK       bool
	dlrk          string
	deliveryLimit int  // quorum only
	sac           bool // x-single-active-consumer
}

// defaultDeliveryLimit is what RabbitMQ 4 gives a quorum queue declared
// without x-delivery-limit.
const defaultDeliveryLimit = 20

// parseQueue validates a queue declaration.
func parseQueue(q transport.Queue) (queueDecl, error) {
	d := queueDecl{quorum: q.Quorum, args: make(map[string]any, len(q.Args)), deliveryLimit: defaultDeliveryLimit}
	bad := func(arg string, v any, want string) error {
		return fmt.Errorf("memory: queue %q: argument %s is %v (%T), want %s", q.Name, arg, v, v, want)
	}
	if q.Quorum && q.Transient {
		return d, fmt.Errorf("memory: queue %q: a quorum queue is always durable; give Quorum or Transient, not both", q.Name)
	}
	for k, v := range q.Args {
		d.args[k] = v
		switch k {
		case "x-message-ttl":
			ms, ok := wire.Number(v)
			if !ok || ms < 0 || math.IsInf(ms, 0) || math.IsNaN(ms) {
				return d, bad(k, v, "a non-negative number of milliseconds")
			}
			d.hasTTL, d.ttl = true, time.Duration(ms*float64(time.Millisecond))
		case "x-dead-letter-exchange":
			s, ok := v.(string)
			if !ok {
				return d, bad(k, v, "an exchange name")
			}
			d.hasDLX, d.dlx = true, s
		case "x-dead-letter-routing-key":
			s, ok := v.(string)
			if !ok {
				return d, bad(k, v, "a routing key")
			}
			d.hasDLRK, d.dlrk = true, s
		case "x-delivery-limit":
			n, ok := wire.Number(v)
			if !ok || n != math.Trunc(n) || math.IsInf(n, 0) {
				return d, bad(k, v, "an integer")
			}
			d.deliveryLimit = int(min(n, math.MaxInt32))
			if n < 0 {
				d.deliveryLimit = math.MaxInt32 // unlimited, as -1 is on RabbitMQ 4
			}
		case "x-single-active-consumer":
			on, ok := v.(bool)
			if !ok {
				return d, bad(k, v, "a bool")
			}
			d.sac = on
		case "x-queue-type":
			s, ok := v.(string)
			if !ok || (s != "classic" && s != "quorum") {
				return d, bad(k, v, `"classic" or "quorum"`)
			}
			if s == "classic" && q.Quorum {
				return d, fmt.Errorf("memory: queue %q is declared quorum with x-queue-type %q", q.Name, s)
			}
			d.quorum = d.quorum || s == "quorum"
		}
	}
	if d.hasDLRK && !d.hasDLX {
		return d, fmt.Errorf("memory: queue %q has x-dead-letter-routing-key without x-dead-letter-exchange", q.Name)
	}
	return d, nil
}

// conflict describes how d differs from what queue name already has, or
// returns "" when the two are equivalent.
func (d queueDecl) conflict(old queueDecl) string {
	if d.quorum != old.quorum {
		return fmt.Sprintf("x-queue-type %s, not %s", queueType(old.quorum), queueType(d.quorum))
	}
	keys := make([]string, 0, len(d.args)+len(old.args))
	for k := range d.args {
		keys = append(keys, k)
	}
	for k := range old.args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		if k == "x-queue-type" {
			continue
		}
		was, wasOK := old.args[k]
		now, nowOK := d.args[k]
		switch {
		case wasOK && !nowOK:
			return fmt.Sprintf("%s %v, not absent", k, was)
		case !wasOK && nowOK:
			return fmt.Sprintf("no %s, not %v", k, now)
		case !sameArg(was, now):
			return fmt.Sprintf("%s %v, not %v", k, was, now)
		}
	}
	return ""
}

func queueType(quorum bool) string {
	if quorum {
		return "quorum"
	}
	return "classic"
}

// sameArg compares two argument values, numbers by value whatever their type.
func sameArg(a, b any) bool {
	if x, ok := wire.Number(a); ok {
		y, ok := wire.Number(b)
		return ok && x == y
	}
	return reflect.DeepEqual(a, b)
}

// Declare creates exchanges, queues and bindings in order, stopping at the
// first that fails. Declaring what exists, as it is, does nothing.
func (t *Transport) Declare(ctx context.Context, topology ...transport.Topology) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.closed {
		return closedError("declare")
	}
	for _, item := range topology {
		// What RabbitMQ would refuse or mangle, by the rules both
		// transports share.
		if err := wire.CheckTopology(item); err != nil {
			return fmt.Errorf("memory: declare %s: %w", wire.Describe(item), err)
		}
	}
	for _, item := range topology {
		var err error
		switch v := item.(type) {
		case transport.Exchange:
			err = b.declareExchangeLocked(v)
		case *transport.Exchange:
			err = declarePtr(v, b.declareExchangeLocked)
		case transport.Queue:
			err = b.declareQueueLocked(v)
		case *transport.Queue:
			err = declarePtr(v, b.declareQueueLocked)
		case transport.Binding:
			err = b.bindLocked(v)
		case *transport.Binding:
			err = declarePtr(v, b.bindLocked)
		case transport.ExchangeBinding:
			err = b.bindExchangeLocked(v)
		case *transport.ExchangeBinding:
			err = declarePtr(v, b.bindExchangeLocked)
		default:
			err = fmt.Errorf("memory: cannot declare %T", item)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func declarePtr[T any](v *T, declare func(T) error) error {
	if v == nil {
		return fmt.Errorf("memory: cannot declare a nil %T", v)
	}
	return declare(*v)
}

func (b *Broker) declareExchangeLocked(x transport.Exchange) error {
	kind := x.Kind
	if kind == "" {
		kind = kindDirect
	}
	switch {
	case x.Name == "":
		return fmt.Errorf("memory: the default exchange cannot be declared")
	case kind != kindDirect && kind != kindTopic && kind != kindFanout && kind != kindHeaders && kind != kindConsistentHash:
		return fmt.Errorf("memory: exchange %q has unknown kind %q (want direct, topic, fanout, headers or x-consistent-hash)", x.Name, x.Kind)
	}
	var hash hashOn
	if kind == kindConsistentHash {
		var err error
		if hash, err = parseHashArgs(x.Name, x.Args); err != nil {
			return err
		}
	}
	if old, ok := b.exchanges[x.Name]; ok {
		if old.kind != kind {
			return errorf(transport.ErrTopologyConflict,
				"memory: exchange %q already exists as kind %s, not %s", x.Name, old.kind, kind)
		}
		// As on RabbitMQ 3.10, which compares only alternate-exchange, other
		// arguments do not conflict: the first declaration's stand.
		return nil
	}
	if strings.HasPrefix(x.Name, "amq.") {
		return fmt.Errorf("memory: exchange name %q is reserved: the amq. prefix belongs to the broker", x.Name)
	}
	b.exchanges[x.Name] = &exchange{name: x.Name, kind: kind, hash: hash}
	return nil
}

func (b *Broker) declareQueueLocked(x transport.Queue) error {
	if x.Name == "" {
		return fmt.Errorf("memory: a queue needs a name")
	}
	if strings.HasPrefix(x.Name, "amq.") {
		return fmt.Errorf("memory: queue name %q is reserved: the amq. prefix belongs to the broker", x.Name)
	}
	d, err := parseQueue(x)
	if err != nil {
		return err
	}
	if _, ok := b.leases[x.Name]; ok {
		return errorf(transport.ErrLocked, "memory: queue %q is held as a lease by a client", x.Name)
	}
	if old, ok := b.queues[x.Name]; ok {
		if d.quorum && !old.decl.quorum {
			return errorf(transport.ErrTopologyConflict, "memory: queue %q exists as a classic queue and is declared as a quorum queue; "+
				"a queue's type cannot change in place: move its messages to a new quorum queue (acemq replay), delete it, "+
				"and declare it again (docs/cluster.md, \"Moving to quorum queues\")", x.Name)
		}
		if diff := d.conflict(old.decl); diff != "" {
			return errorf(transport.ErrTopologyConflict, "memory: queue %q already exists with %s", x.Name, diff)
		}
		return nil
	}
	b.queues[x.Name] = &queue{b: b, name: x.Name, decl: d}
	return nil
}

func (b *Broker) bindLocked(x transport.Binding) error {
	if x.Exchange == "" {
		return fmt.Errorf("memory: queue %q cannot be bound to the default exchange", x.Queue)
	}
	ex, ok := b.exchanges[x.Exchange]
	if !ok {
		return errorf(transport.ErrNotFound, "memory: binding queue %q: no exchange named %q", x.Queue, x.Exchange)
	}
	q, ok := b.queues[x.Queue]
	if !ok {
		return errorf(transport.ErrNotFound, "memory: binding to exchange %q: no queue named %q", x.Exchange, x.Queue)
	}
	return ex.addLocked(binding{key: x.Key, q: q})
}

// bindExchangeLocked binds exchange Destination to exchange Source.
func (b *Broker) bindExchangeLocked(x transport.ExchangeBinding) error {
	if x.Source == "" || x.Destination == "" {
		return fmt.Errorf("memory: binding exchange %q to exchange %q: the default exchange cannot be bound", x.Destination, x.Source)
	}
	src, ok := b.exchanges[x.Source]
	if !ok {
		return errorf(transport.ErrNotFound, "memory: binding exchange %q: no source exchange named %q", x.Destination, x.Source)
	}
	dst, ok := b.exchanges[x.Destination]
	if !ok {
		return errorf(transport.ErrNotFound, "memory: binding to exchange %q: no destination exchange named %q", x.Source, x.Destination)
	}
	return src.addLocked(binding{key: x.Key, x: dst})
}

// addLocked adds bd to ex unless it is there already; a consistent-hash
// exchange takes only a weight as the key.
func (ex *exchange) addLocked(bd binding) error {
	if ex.kind == kindConsistentHash {
		if _, err := parseWeight(ex.name, bd.key); err != nil {
			return err
		}
	}
	if slices.Contains(ex.bindings, bd) {
		return nil
	}
	ex.bindings = append(ex.bindings, bd)
	ex.ring = nil
	return nil
}

// unbindLocked drops every binding to queue q or exchange x from every
// exchange.
func (b *Broker) unbindLocked(q *queue, x *exchange) {
	for _, ex := range b.exchanges {
		n := len(ex.bindings)
		ex.bindings = slices.DeleteFunc(ex.bindings, func(bd binding) bool {
			return (q != nil && bd.q == q) || (x != nil && bd.x == x)
		})
		if len(ex.bindings) != n {
			ex.ring = nil
		}
	}
}

// Inspect reports queue's ready messages and active consumers, or an error
// wrapping transport.ErrNotFound.
func (t *Transport) Inspect(ctx context.Context, queue string) (transport.QueueInfo, error) {
	if err := ctx.Err(); err != nil {
		return transport.QueueInfo{}, err
	}
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.closed {
		return transport.QueueInfo{}, closedError(fmt.Sprintf("inspect queue %q", queue))
	}
	q, ok := b.queues[queue]
	if !ok {
		return transport.QueueInfo{}, errorf(transport.ErrNotFound, "memory: inspect: no queue named %q", queue)
	}
	b.markDirtyLocked(q) // expire what is due before counting
	b.flushLocked()
	return q.info(), nil
}

// DeleteQueue deletes queue with its ready messages and bindings; its
// consumers end. Deliveries already handed out may still be settled, to no
// effect. A missing queue is not an error.
func (t *Transport) DeleteQueue(ctx context.Context, queue string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.closed {
		return closedError(fmt.Sprintf("delete queue %q", queue))
	}
	q, ok := b.queues[queue]
	if !ok {
		return nil
	}
	delete(b.queues, queue)
	q.deleted = true
	q.stopLocked()
	for q.ready.len() > 0 {
		b.releaseLocked(q.ready.popFront())
	}
	b.unbindLocked(q, nil)
	gone := errorf(transport.ErrNotFound, "memory: queue %q was deleted while consumed", queue)
	for _, c := range q.consumers {
		for c.inbox.len() > 0 {
			b.releaseLocked(c.inbox.popFront())
		}
		c.end(gone)
	}
	q.consumers = nil
	return nil
}

// DeleteExchange deletes exchange with its bindings: those to its queues
// and exchanges, and those of other exchanges to it. A queue that names it
// as its dead-letter exchange keeps naming it, as on RabbitMQ. A missing
// exchange is not an error; the default exchange and the amq.* ones cannot
// be deleted.
func (t *Transport) DeleteExchange(ctx context.Context, exchange string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if exchange == "" || strings.HasPrefix(exchange, "amq.") {
		return fmt.Errorf("memory: delete exchange %q: a predeclared exchange cannot be deleted", exchange)
	}
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.closed {
		return closedError(fmt.Sprintf("delete exchange %q", exchange))
	}
	ex, ok := b.exchanges[exchange]
	if !ok {
		return nil
	}
	delete(b.exchanges, exchange)
	ex.bindings, ex.ring = nil, nil
	b.unbindLocked(nil, ex)
	return nil
}

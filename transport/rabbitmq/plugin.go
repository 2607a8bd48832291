package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/internal/wire"
	"github.com/acemq/acemq/transport"
)

// kindConsistentHash is the exchange kind of the consistent-hash plugin.
const kindConsistentHash = "x-consistent-hash"

// pluginKinds maps each exchange kind a plugin provides to the plugin.
var pluginKinds = map[string]string{
	kindConsistentHash: "rabbitmq_consistent_hash_exchange",
}

// ordered is the state behind ordered consumers' parts: the plugin exchange
// kinds the broker was found to have, and the leases held.
type ordered struct {
	mu     sync.Mutex
	kinds  map[string]bool
	leases map[string]*lease
}

// checkPluginKind makes sure, before x is declared on the transport's
// connection, that the broker has the plugin behind x's kind. A broker
// without it answers the declaration with COMMAND_INVALID ("unknown
// exchange type" from RabbitMQ 3.10, or "invalid exchange type" once the
// plugin was loaded and then disabled), a connection error that would take
// every publisher and consumer of the connection down with it (RabbitMQ 4
// answers PRECONDITION_FAILED and closes the channel only). So the first
// declaration of a kind's exchange goes over a short-lived connection of
// its own; once one succeeded the kind is known and this does nothing.
func (t *Transport) checkPluginKind(ctx context.Context, x transport.Exchange) error {
	plugin := pluginKinds[x.Kind]
	if plugin == "" {
		return nil
	}
	t.ord.mu.Lock()
	known := t.ord.kinds[x.Kind]
	t.ord.mu.Unlock()
	if known {
		return nil
	}
	if err := t.probeKind(ctx, x, plugin); err != nil {
		return err
	}
	t.ord.mu.Lock()
	if t.ord.kinds == nil {
		t.ord.kinds = make(map[string]bool)
	}
	t.ord.kinds[x.Kind] = true
	t.ord.mu.Unlock()
	return nil
}

// probeKind declares x over a connection of its own to the node in use,
// and reports a missing plugin by name.
func (t *Transport) probeKind(ctx context.Context, x transport.Exchange, plugin string) error {
	op := fmt.Sprintf("declare exchange %q", x.Name)
	args, err := wire.ToTable(x.Args)
	if err != nil { // validate refuses these first: this is a safety net
		return fmt.Errorf("rabbitmq: %s: arguments: %w", op, err)
	}
	s, err := t.current(ctx, op)
	if err != nil {
		return err
	}
	conn, err := t.dial(ctx, s.node)
	if err != nil {
		return fmt.Errorf("rabbitmq: %s: connecting to check for plugin %s: %w", op, plugin, err)
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: %s: checking for plugin %s: %w", op, plugin, t.scrub(err))
	}
	err = ch.ExchangeDeclare(x.Name, x.Kind, true, false, false, false, args)
	switch {
	case err == nil:
		return nil
	case missingKind(err):
		return fmt.Errorf("rabbitmq: %s: the broker has no exchange type %s: enable the plugin %s "+
			"(rabbitmq-plugins enable %s) on every node: %w: %w", op, x.Kind, plugin, plugin, transport.ErrMissingPlugin, err)
	case ctx.Err() != nil:
		return ctxError(op, ctx)
	}
	return classify("declare", "exchange", x.Name, err)
}

// missingKind reports the broker's answer to a declaration of an exchange
// kind it does not have: COMMAND_INVALID, closing the connection, up to
// 3.x; PRECONDITION_FAILED, closing the channel only, on RabbitMQ 4.
func missingKind(err error) bool {
	var e *amqp.Error
	return errors.As(err, &e) && (e.Code == amqp.CommandInvalid || e.Code == amqp.PreconditionFailed) && strings.Contains(e.Reason, "exchange type")
}

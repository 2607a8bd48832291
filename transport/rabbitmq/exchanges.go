package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// exchangeCheck makes sure an exchange exists before the first publish to
// it. A publish to a missing exchange makes RabbitMQ close the channel it
// came on, and every publisher shares one channel: so the first publish to
// an exchange the transport has not seen checks it with a passive declare
// on a channel of its own, which the broker may close instead. Exchanges
// found are remembered for the transport's life; the default exchange is
// never checked. Concurrent first publishes to one exchange share one
// check. An exchange deleted after its check is caught by the publishing
// channel's close (see pubChannel.die), which forgets it.
type exchangeCheck struct {
	known sync.Map // exchange name -> struct{}: exists, as far as we know

	mu      sync.Mutex
	pending map[string]*exchangeProbe // checks under way
}

// exchangeProbe is one passive declare under way; done is closed once err
// is set.
type exchangeProbe struct {
	done chan struct{}
	err  error
}

// forget drops exchange from the known ones: the broker said it is gone.
func (c *exchangeCheck) forget(exchange string) { c.known.Delete(exchange) }

// exchangeExists returns nil once exchange is known to exist, checking it
// when it is not yet known, or an error wrapping transport.ErrNotFound,
// naming it, when it does not exist; ctx bounds the wait.
func (t *Transport) exchangeExists(ctx context.Context, exchange string) error {
	c := &t.exchanges
	if exchange == "" {
		return nil
	}
	if _, ok := c.known.Load(exchange); ok {
		return nil
	}
	for {
		c.mu.Lock()
		p, running := c.pending[exchange]
		if !running {
			p = &exchangeProbe{done: make(chan struct{})}
			if c.pending == nil {
				c.pending = make(map[string]*exchangeProbe)
			}
			c.pending[exchange] = p
		}
		c.mu.Unlock()
		if !running {
			p.err = t.probeExchange(ctx, exchange)
			if p.err == nil {
				c.known.Store(exchange, struct{}{})
			}
			c.mu.Lock()
			delete(c.pending, exchange)
			c.mu.Unlock()
			close(p.done)
			return p.err
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctxError(fmt.Sprintf("publish to exchange %q waiting for its check", exchange), ctx)
		}
		// Another caller's ctx ended its check: that says nothing of this
		// exchange, so check again under this caller's.
		if p.err != nil && (errors.Is(p.err, context.Canceled) || errors.Is(p.err, context.DeadlineExceeded)) {
			continue
		}
		return p.err
	}
}

// probeExchange declares exchange passively on a fresh channel.
func (t *Transport) probeExchange(ctx context.Context, exchange string) error {
	op := fmt.Sprintf("publish to exchange %q checking that it exists", exchange)
	return t.withChannel(ctx, op, func(ch *amqp.Channel) error {
		// The broker ignores the kind and flags of a passive declare.
		if err := ch.ExchangeDeclarePassive(exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
			return classify("publish to", "exchange", exchange, t.scrub(err))
		}
		return nil
	})
}

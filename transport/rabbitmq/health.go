package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/acemq/acemq/transport"
)

var _ transport.Subscriptions = (*Transport)(nil)

// Health returns nil when the connection is up, the broker is not blocking
// it, and every running Consume is consuming. Otherwise it returns an
// error saying what is down and since when: the connection (with the
// reconnection attempts made and the last failure, the URL's password
// redacted), the broker's block, and each consumer that is not consuming,
// joined. A closed transport reports transport.ErrClosed.
func (t *Transport) Health(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return ctxError("health", ctx)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return errClosed("health")
	}
	s := t.sess
	down := t.down
	consumers := make([]*consumerState, 0, len(t.consumers))
	for c := range t.consumers {
		consumers = append(consumers, c)
	}
	t.mu.Unlock()

	var errs []error
	if s == nil {
		if down.err == nil {
			down.err = errConnectionLost
		}
		where := t.nodes[down.from].safe
		if len(t.nodes) > 1 {
			where = fmt.Sprintf("%s (lost; %d nodes in the list)", where, len(t.nodes))
		}
		errs = append(errs, fmt.Errorf("rabbitmq: connection to %s down since %s (%s to reconnect so far): %w",
			where, stamp(down.since), plural(down.attempts, "attempt"), down.err))
	} else {
		s.mu.Lock()
		if s.unblocked != nil {
			errs = append(errs, fmt.Errorf("rabbitmq: connection to %s blocked by the broker since %s: %s",
				t.nodes[s.node].safe, stamp(s.blockedSince), s.blockReason))
		}
		s.mu.Unlock()
	}
	sort.Slice(consumers, func(i, j int) bool { return consumers[i].queue < consumers[j].queue })
	for _, c := range consumers {
		if consuming, since, err := c.view(s != nil, down); !consuming {
			errs = append(errs, t.idleError(c.queue, since, err))
		}
	}
	return errors.Join(errs...)
}

// view is how Health and Subscription see c: whether it consumes, since
// when, and why not. While the connection is down, one that says it
// consumes has not noticed the loss yet: it does not, since the loss.
func (c *consumerState) view(connected bool, down downState) (consuming bool, since time.Time, err error) {
	c.mu.Lock()
	consuming, since, err = c.consuming, c.since, c.err
	c.mu.Unlock()
	if consuming && !connected {
		if down.err == nil {
			down.err = errConnectionLost
		}
		return false, down.since, down.err
	}
	return consuming, since, err
}

// idleError is Health's line for a consumer on queue not consuming since
// since, for why.
func (t *Transport) idleError(queue string, since time.Time, why error) error {
	return fmt.Errorf("rabbitmq: consumer on %q not consuming since %s: %w", queue, stamp(since), t.scrub(why))
}

// Subscription reports how the running Consume and ConsumeHandOver calls
// of queue stand (transport.Subscriptions), as Health sees them: each is
// consuming once its channel is subscribed, and not while it waits for
// the connection or resumes after losing it; while the connection is down
// none is, since the loss, also before its Consume has noticed. Its error
// is Health's line for the first of them not consuming. One making its
// first subscription on a live connection is left out, as not running
// yet (Health says it is starting). A closed transport has none.
func (t *Transport) Subscription(queue string) (transport.Subscription, bool) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return transport.Subscription{}, false
	}
	connected, down := t.sess != nil, t.down
	var states []*consumerState
	for c := range t.consumers {
		if c.queue == queue {
			states = append(states, c)
		}
	}
	t.mu.Unlock()
	found := false
	sub := transport.Subscription{Consuming: true}
	var (
		idle  bool      // one is not consuming
		first time.Time // since when the first of those is not
		why   error
	)
	for _, c := range states {
		consuming, since, err := c.view(connected, down)
		if connected && err == errStarting {
			continue // its first subscription is being made
		}
		found = true
		switch {
		case consuming && sub.Consuming && since.After(sub.Since):
			sub.Since = since
		case !consuming && (!idle || since.Before(first)):
			idle, first, why = true, since, err
		}
	}
	if !found {
		return transport.Subscription{}, false
	}
	if idle {
		sub = transport.Subscription{Since: first, Err: t.idleError(queue, first, why)}
	}
	return sub, true
}

// plural counts n of a noun that takes an s: "1 attempt", "3 attempts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

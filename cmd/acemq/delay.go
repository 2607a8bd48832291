package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/internal/delay"
)

// delayStats prints what waits in the vhost's delay topology (SPEC §20),
// when it has one: the messages in its levels, how soon the soonest is due
// at the latest, those due and not yet forwarded, and the unroutable
// ones, as delay.ReadCounts reads them from the queues' counts.
func delayStats(ctx context.Context, mq *acemq.Conn, w io.Writer) error {
	c, ok, err := delay.ReadCounts(ctx, mq.Transport())
	if err != nil {
		return fmt.Errorf("acemq: stats: %w", err)
	}
	if !ok {
		return nil // no delayed message was ever sent on this vhost
	}
	fmt.Fprintf(w, "Delayed (acemq.delay.*): %d waiting", c.Waiting)
	if c.Soonest >= 0 {
		fmt.Fprintf(w, ", the soonest due within %s", c.Soonest)
	}
	fmt.Fprintf(w, "; %d due, not yet forwarded (%d forwarders); %d unroutable at their due time (%s).\n",
		c.Due, c.Forwarders, c.Unroutable, delay.UnroutableQueue)
	return nil
}

// delayedTo says where a message in the delay topology goes at its due
// time, from its reserved header; "" for any other message.
func delayedTo(env *acemq.Envelope) string {
	v, ok := env.Reserved()[delay.HeaderTo]
	if !ok {
		return ""
	}
	exchange, key, err := delay.DecodeTo(v)
	if err != nil {
		return err.Error()
	}
	if exchange == "" {
		return fmt.Sprintf("the default exchange, key %q", key)
	}
	return fmt.Sprintf("exchange %q, key %q", exchange, key)
}

// dueLine shows a due time and how far it is from now.
func dueLine(due, now time.Time) string {
	s := due.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	if d := due.Sub(now).Round(time.Millisecond); d > 0 {
		return s + " (in " + d.String() + ")"
	}
	return s + " (" + (-due.Sub(now).Round(time.Millisecond)).String() + " ago)"
}

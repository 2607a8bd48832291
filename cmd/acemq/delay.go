package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/internal/delay"
	"github.com/acemq/acemq/transport"
)

// delayStats prints what waits in the vhost's delay topology (SPEC §20),
// when it has one: the messages in its levels, how soon the soonest is due
// at the latest, those due and not yet forwarded, and the unroutable
// ones. It reads queue counts only; a level's messages are not touched
// (taking one to read its due time would count a delivery against a
// quorum queue's delivery limit). The soonest is bounded by the shortest
// level that holds a message: its head leaves that level within the
// level's TTL and the levels below it within as long again, less a unit.
func delayStats(ctx context.Context, mq *acemq.Conn, w io.Writer) error {
	t := mq.Transport()
	due, err := t.Inspect(ctx, delay.DueQueue)
	if errors.Is(err, transport.ErrNotFound) {
		return nil // no delayed message was ever sent on this vhost
	}
	if err != nil {
		return fmt.Errorf("acemq: stats: %w", err)
	}
	waiting, soonest := 0, time.Duration(-1)
	for k := range delay.Levels {
		info, err := t.Inspect(ctx, delay.LevelQueue(k))
		if err != nil {
			return fmt.Errorf("acemq: stats: the delay topology: %w", err)
		}
		waiting += info.Messages
		if info.Messages > 0 && soonest < 0 {
			soonest = 2*delay.LevelTTL(k) - delay.Unit
		}
	}
	unroutable, err := t.Inspect(ctx, delay.UnroutableQueue)
	if err != nil {
		return fmt.Errorf("acemq: stats: the delay topology: %w", err)
	}
	fmt.Fprintf(w, "Delayed (acemq.delay.*): %d waiting", waiting)
	if soonest >= 0 {
		fmt.Fprintf(w, ", the soonest due within %s", soonest)
	}
	fmt.Fprintf(w, "; %d due, not yet forwarded (%d forwarders); %d unroutable at their due time (%s).\n",
		due.Messages, due.Consumers, unroutable.Messages, delay.UnroutableQueue)
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

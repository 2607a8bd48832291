// Package delay is the shape of acemq's delay topology (SPEC §20): the
// names of its exchanges and queues, the routing key that carries a
// message's delay through it and the reserved headers a delayed message
// travels with, and ReadCounts, what waits in it. The root package sends
// into it and forwards out of it; cmd/acemq and the console read it.
//
// # The topology
//
// A delay is counted in units of [Unit] (125 ms), rounded up. Level k,
// for k from 0 to [Levels]-1, is a queue acemq.delay.level.NN where every
// message waits Unit<<k (x-message-ttl) and is then dead-lettered, through
// the default exchange, to acemq.delay.due. A message with n units to go
// goes to the level of n's highest set bit, so it waits at most n units
// there and less than half of n remains. A Conn consumes acemq.delay.due:
// a message still not due by its clock goes on to the next level the same
// way, and one that is due goes to the exchange and routing key it was
// sent to. A delay of n units takes as many hops as n has bits set, at
// most 31, usually a handful; between hops it waits in the broker alone.
//
// Since every message of one level queue waits the same time, the queue
// expires in order: the head is always the next message due, which a
// queue holding messages of many TTLs cannot promise.
package delay

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/acemq/acemq/transport"
)

// Unit is the step a delay is counted in; a delay is rounded up to it.
const Unit = 125 * time.Millisecond

// Levels is the number of binary levels: Unit<<Levels - Unit is the
// longest delay the topology holds, past acemq.MaxDelay.
const Levels = 31

// Names of the topology's fixed parts.
const (
	// DueQueue holds the messages whose level's wait is over, for a Conn
	// to send on: to the next level, or where they were sent.
	DueQueue = "acemq.delay.due"
	// UnroutableQueue holds the delayed messages no queue took at their
	// due time, with the reason in x-acemq-error.
	UnroutableQueue = "acemq.delay.unroutable"
)

// Reserved headers of a delayed message.
const (
	// HeaderDue is when the message is due (Envelope.Due), an RFC 3339
	// time in UTC with milliseconds.
	HeaderDue = "x-acemq-due"
	// HeaderTo is where the message goes at its due time: the exchange
	// and routing key it was sent to, see EncodeTo.
	HeaderTo = "x-acemq-delay-to"
	// HeaderError is the reason on a message in UnroutableQueue.
	HeaderError = "x-acemq-error"
)

// LevelQueue is the name of level k's queue.
func LevelQueue(k int) string { return fmt.Sprintf("acemq.delay.level.%02d", k) }

// LevelTTL is how long a message waits in level k's queue.
func LevelTTL(k int) time.Duration { return Unit << k }

// Queues lists every queue of the topology: the levels, longest first,
// then DueQueue and UnroutableQueue.
func Queues() []string {
	qs := make([]string, 0, Levels+2)
	for k := Levels - 1; k >= 0; k-- {
		qs = append(qs, LevelQueue(k))
	}
	return append(qs, DueQueue, UnroutableQueue)
}

// Topology is the whole delay topology. quorum makes its queues quorum
// queues dead-lettering at least once (RabbitMQ 3.10+), so that neither
// the loss of a node nor a dead-lettering that finds no queue loses a
// message; without it they are durable classic queues.
func Topology(quorum bool) []transport.Topology {
	// A due message a forwarder gave back too often (a quorum queue's
	// x-delivery-limit, 20 by default on RabbitMQ 4, drops it otherwise)
	// goes to UnroutableQueue rather than being lost.
	dueArgs := map[string]any{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": UnroutableQueue,
	}
	if quorum {
		dueArgs["x-dead-letter-strategy"] = "at-least-once"
		dueArgs["x-overflow"] = "reject-publish"
	}
	t := []transport.Topology{
		transport.Queue{Name: UnroutableQueue, Quorum: quorum},
		transport.Queue{Name: DueQueue, Quorum: quorum, Args: dueArgs},
	}
	for k := range Levels {
		args := map[string]any{
			"x-message-ttl":             LevelTTL(k).Milliseconds(),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": DueQueue,
		}
		if quorum {
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
		t = append(t, transport.Queue{Name: LevelQueue(k), Quorum: quorum, Args: args})
	}
	return t
}

// Units is d in Units, rounded up, so that a message never arrives early.
func Units(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64((d + Unit - 1) / Unit)
}

// Hop is the level queue a message with wait still to go waits in next:
// the level of the highest set bit of wait in Units. wait must be positive
// and at most Unit<<Levels - Unit.
func Hop(wait time.Duration) string {
	return LevelQueue(bits.Len64(Units(wait)) - 1)
}

// Hops is how many level queues a wait passes through.
func Hops(wait time.Duration) int { return bits.OnesCount64(Units(wait)) }

// EncodeTo writes an exchange and routing key as one header value:
// the exchange's length, a colon, the exchange, then the key.
func EncodeTo(exchange, key string) string {
	return strconv.Itoa(len(exchange)) + ":" + exchange + key
}

// DecodeTo reads what EncodeTo wrote.
func DecodeTo(v any) (exchange, key string, err error) {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case []byte:
		s = string(x)
	default:
		return "", "", fmt.Errorf("header %s is a %T, want a string", HeaderTo, v)
	}
	i := strings.IndexByte(s, ':')
	n, err := strconv.Atoi(s[:max(i, 0)])
	if i < 0 || err != nil || n < 0 || n > len(s)-i-1 {
		return "", "", fmt.Errorf("header %s is %q, want LENGTH:EXCHANGEKEY", HeaderTo, s)
	}
	return s[i+1 : i+1+n], s[i+1+n:], nil
}

// dueLayout is how HeaderDue writes a time.
const dueLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatDue writes t as HeaderDue carries it: UTC, RFC 3339 with
// milliseconds, rounded up so that a message is never taken to be due
// before t.
func FormatDue(t time.Time) string {
	if r := t.Truncate(time.Millisecond); r.Before(t) {
		t = r.Add(time.Millisecond)
	}
	return t.UTC().Format(dueLayout)
}

// ParseDue reads a HeaderDue value.
func ParseDue(v any) (time.Time, error) {
	switch x := v.(type) {
	case time.Time:
		return x.UTC(), nil
	case string:
		t, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return time.Time{}, fmt.Errorf("header %s is %q, want an RFC 3339 time", HeaderDue, x)
		}
		return t.UTC(), nil
	case []byte:
		return ParseDue(string(x))
	}
	return time.Time{}, fmt.Errorf("header %s is a %T, want an RFC 3339 time", HeaderDue, v)
}

package delay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq/transport"
)

// Counts is what waits in a vhost's delay topology, read from its queues'
// counts alone.
type Counts struct {
	// Waiting is how many messages wait in the levels.
	Waiting int
	// Levels are the levels holding a message, shortest first.
	Levels []LevelCount
	// Due is how many messages wait in DueQueue for a forwarder, and
	// Forwarders how many consumers it has.
	Due, Forwarders int
	// Unroutable is how many messages wait in UnroutableQueue: delayed
	// messages no queue took at their due time.
	Unroutable int
	// Soonest bounds when the soonest waiting message is due: within
	// Soonest of the read. It is negative when nothing waits.
	Soonest time.Duration
}

// LevelCount is one level's queue and the messages it holds.
type LevelCount struct {
	// Level is k of LevelQueue(k); Queue is its name.
	Level int
	Queue string
	// TTL is how long a message waits there (LevelTTL).
	TTL time.Duration
	// Messages is how many wait there.
	Messages int
}

// ReadCounts reads the counts of t's delay topology. ok is false, with no
// error, when the vhost has none (no delayed message was ever sent on it).
//
// It reads queue counts only; a level's messages are not touched (taking
// one to read its due time would count a delivery against a quorum
// queue's delivery limit). The soonest is bounded by the shortest level
// that holds a message: its head leaves that level within the level's TTL
// and the levels below it within as long again, less a Unit.
func ReadCounts(ctx context.Context, t transport.Transport) (c Counts, ok bool, err error) {
	due, err := t.Inspect(ctx, DueQueue)
	if errors.Is(err, transport.ErrNotFound) {
		return Counts{}, false, nil
	}
	if err != nil {
		return Counts{}, false, err
	}
	c = Counts{Due: due.Messages, Forwarders: due.Consumers, Soonest: -1}
	for k := range Levels {
		info, err := t.Inspect(ctx, LevelQueue(k))
		if err != nil {
			return Counts{}, false, fmt.Errorf("the delay topology: %w", err)
		}
		if info.Messages == 0 {
			continue
		}
		c.Waiting += info.Messages
		c.Levels = append(c.Levels, LevelCount{Level: k, Queue: LevelQueue(k), TTL: LevelTTL(k), Messages: info.Messages})
		if c.Soonest < 0 {
			c.Soonest = 2*LevelTTL(k) - Unit
		}
	}
	unroutable, err := t.Inspect(ctx, UnroutableQueue)
	if err != nil {
		return Counts{}, false, fmt.Errorf("the delay topology: %w", err)
	}
	c.Unroutable = unroutable.Messages
	return c, true, nil
}

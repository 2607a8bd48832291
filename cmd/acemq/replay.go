package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
)

// maxSkipped bounds the messages a filtered replay leaves in place. Replay
// holds each one unacked, body and all, until it ends, so the bound keeps
// the command's memory (and the broker's unacked count) in check; past it
// the replay stops and says what to do instead.
const maxSkipped = 20000

// runReplay moves messages from one queue to another with patterns.Replay:
// each keeps its ID, headers and trace context, starts again at attempt 1,
// and is confirmed on the target before it leaves the source. A long replay
// prints a progress line every -progress; the report comes at the end, also
// when the replay was interrupted.
func runReplay(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("replay", "FROM TO", "Move messages from FROM (a .dlq or .parked queue) back to TO, oldest first.")
	limit := fs.Int("limit", 0, "stop after moving this many messages (0: until FROM is empty)")
	types := fs.String("type", "", "move only messages whose envelope Type is one of these (comma-separated); the rest stay")
	rate := fs.Float64("rate", 0, "move at most this many messages a second (0: as fast as the broker confirms)")
	every := fs.Duration("progress", 2*time.Second, "print a progress line this often (0: never)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 2:
		return usagef("replay: name the queue to move from and the queue to move to")
	case pos[0] == pos[1]:
		return usagef("replay: %q to itself would never end", pos[0])
	case *limit < 0:
		return usagef("replay: -limit must not be negative")
	case *rate < 0:
		return usagef("replay: -rate must not be negative")
	case *every < 0:
		return usagef("replay: -progress must not be negative")
	}
	from, to := pos[0], pos[1]
	want := typeSet(*types)

	mq, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer mq.Close()
	info, err := mq.Transport().Inspect(ctx, from)
	if err != nil {
		return fmt.Errorf("acemq: replay: the queue to move from, %s: %w", from, err)
	}
	// The target must exist before anything is taken or counted: a replay
	// into nowhere should say so, not report a run of failures. An ordered
	// queue is its exchange and partitions; Replay publishes to the
	// exchange, which routes each message by its key.
	ordered, err := patterns.OrderedTarget(ctx, mq.Transport(), to)
	if err != nil {
		return fmt.Errorf("acemq: replay: the target queue %s: %w", to, err)
	}
	through := ""
	if ordered {
		through = " (an ordered queue: through its exchange " + to + ", by each message's key)"
	}
	fmt.Fprintf(c.stdout, "replaying from %s (%d ready) to %s%s\n", from, info.Messages, to, through)

	// The filter ends the replay, through rctx, once it has left too many
	// messages in place; Progress keeps the counts the progress line shows.
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var moved, skipped, failed atomic.Int64
	opts := []patterns.ReplayOption{
		patterns.Filter(func(e *acemq.Envelope) bool {
			if want != nil && !want[e.Type] {
				if skipped.Load()+1 >= maxSkipped {
					cancel(errTooManySkipped)
				}
				return false
			}
			return true
		}),
		patterns.Progress(func(r patterns.ReplayReport) {
			moved.Store(int64(r.Moved))
			skipped.Store(int64(r.Skipped))
			failed.Store(int64(r.Failed))
		}),
		patterns.Limit(*limit),
		patterns.Rate(*rate),
	}
	stop := c.progress(*every, func() string {
		return fmt.Sprintf("replay: moved %d, skipped %d, failed %d (of %d ready at the start)",
			moved.Load(), skipped.Load(), failed.Load(), info.Messages)
	})
	rep, err := patterns.Replay(rctx, mq, from, to, opts...)
	stop()
	fmt.Fprintf(c.stdout, "moved %d, skipped %d, failed %d\n", rep.Moved, rep.Skipped, rep.Failed)
	switch {
	case err != nil && context.Cause(rctx) == errTooManySkipped:
		return fmt.Errorf("acemq: replay stopped after leaving %d messages of other types at the head of %s (each is held until the replay ends); "+
			"%d moved. Move or replay those types first, or replay without -type", maxSkipped, from, rep.Moved)
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("acemq: replay interrupted: %d moved; what was not moved is still on %s", rep.Moved, from)
	case err != nil:
		return err
	case want != nil && rep.Moved == 0 && rep.Failed == 0 && rep.Skipped > 0:
		return fmt.Errorf("acemq: replay: no message on %s is of type %s (%d looked at, all left where they were)",
			from, strings.Join(slices.Sorted(maps.Keys(want)), " or "), rep.Skipped)
	}
	return nil
}

var errTooManySkipped = errors.New("too many messages left in place")

// typeSet reads -type: nil when empty, meaning every type.
func typeSet(s string) map[string]bool {
	var set map[string]bool
	for t := range strings.SplitSeq(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			if set == nil {
				set = make(map[string]bool)
			}
			set[t] = true
		}
	}
	return set
}

// progress prints line() to stderr every interval while something changes,
// until the returned stop is called; stop waits for the printer to end.
// A zero interval prints nothing.
func (c *cli) progress(interval time.Duration, line func() string) (stop func()) {
	if interval <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		last := ""
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if l := line(); l != last {
					fmt.Fprintln(c.stderr, l)
					last = l
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

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
	"text/tabwriter"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
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
// when the replay was interrupted. -dry-run lists what would move and
// moves nothing (patterns.DryRun); -skip-missing-blob leaves the messages
// whose object the -store no longer has where they are and moves the rest
// (patterns.SkipMissingBlob with blob.Missing).
func runReplay(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("replay", "FROM TO", "Move messages from FROM (a .dlq or .parked queue) back to TO, oldest first.")
	limit := fs.Int("limit", 0, "stop after moving this many messages (0: until FROM is empty); with -dry-run, after listing this many")
	types := fs.String("type", "", "move only messages whose envelope Type is one of these (comma-separated); the rest stay")
	rate := fs.Float64("rate", 0, "move at most this many messages a second (0: as fast as the broker confirms)")
	every := fs.Duration("progress", 2*time.Second, "print a progress line this often (0: never)")
	storeSpec := fs.String("store", "", "first report the messages whose large-payload object this store (dir:PATH, postgres://..., sqlite:PATH) no longer has")
	table := fs.String("table", blob.DefaultSQLTable, "the object table of an SQL -store")
	dryRun := fs.Bool("dry-run", false, "list what would be moved (ID, type, reason, destination); move and ack nothing, and leave FROM as it was")
	skipMissing := fs.Bool("skip-missing-blob", false, "leave on FROM, and report, every message whose object the -store no longer has; move the rest")
	keysetFile := fs.String("keyset", "", "first report the sealed messages that do not open with the Tink keyset in `FILE` (they would be parked again); replay itself needs no key")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *skipMissing && *storeSpec == "":
		return usagef("replay: -skip-missing-blob needs the store to look in: -store dir:PATH, postgres://... or sqlite:PATH")
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
	keys, err := readKeys(*keysetFile)
	if err != nil {
		return err
	}

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
	var gone func(context.Context, string, []byte) (string, error)
	switch {
	case *skipMissing:
		// Each message is looked for as the replay reaches it, and the
		// ones whose object is gone are reported then.
		s, closeStore, err := openStore(ctx, "replay", *storeSpec, *table)
		if err != nil {
			return err
		}
		defer closeStore()
		gone = blob.Missing(s)
	case *storeSpec != "":
		if err := c.reportGone(ctx, mq, from, *storeSpec, *table, info.Messages); err != nil {
			return err
		}
	}
	if keys != nil {
		if err := c.reportSealed(ctx, mq, from, keys, min(max(info.Messages, 1), maxSkipped)); err != nil {
			return err
		}
	}
	through := ""
	if ordered {
		through = " (an ordered queue: through its exchange " + to + ", by each message's key)"
	}
	if *dryRun {
		fmt.Fprintf(c.stdout, "dry run: what a replay from %s (%d ready) to %s%s would move; nothing is moved or acked\n", from, info.Messages, to, through)
	} else {
		fmt.Fprintf(c.stdout, "replaying from %s (%d ready) to %s%s\n", from, info.Messages, to, through)
	}

	// Each ends the replay, through rctx, once it has left too many
	// messages in place; Progress keeps the counts the progress line shows.
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var moved, skipped, failed, missing, listed atomic.Int64
	list := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	if *dryRun {
		fmt.Fprintln(list, "ID\tTYPE\tREASON\tTO")
	}
	held := 0
	opts := []patterns.ReplayOption{
		patterns.Filter(func(e *acemq.Envelope) bool { return want == nil || want[e.Type] }),
		patterns.Each(func(it patterns.ReplayItem) {
			switch it.Outcome {
			case patterns.ReplayListed:
				fmt.Fprintf(list, "%s\t%s\t%s\t%s\n", safe(it.ID), safe(it.Type), safe(clip(it.Reason, maxReasonShown)), destination(it))
			case patterns.ReplayMissingBlob:
				if *dryRun {
					fmt.Fprintf(list, "%s\t%s\t%s\tstays on %s (the store no longer has its %s)\n", safe(it.ID), safe(it.Type), safe(clip(it.Reason, maxReasonShown)), from, safe(it.Missing))
				} else {
					fmt.Fprintf(c.stdout, "missing blob: message %s (type %s) stays on %s; the store no longer has its %s\n", safe(it.ID), safe(it.Type), from, safe(it.Missing))
				}
			}
			if it.Outcome != patterns.ReplayMoved {
				if held++; held >= maxSkipped {
					cancel(errTooManySkipped)
				}
			}
		}),
		patterns.Progress(func(r patterns.ReplayReport) {
			moved.Store(int64(r.Moved))
			skipped.Store(int64(r.Skipped))
			failed.Store(int64(r.Failed))
			missing.Store(int64(r.Missing))
			listed.Store(int64(r.Listed))
		}),
		patterns.Limit(*limit),
		patterns.Rate(*rate),
	}
	if gone != nil {
		opts = append(opts, patterns.SkipMissingBlob(gone))
	}
	if *dryRun {
		opts = append(opts, patterns.DryRun())
	}
	stop := c.progress(*every, func() string {
		if *dryRun {
			return fmt.Sprintf("replay -dry-run: would move %d, skipped %d, missing blob %d, failed %d (of %d ready at the start)",
				listed.Load(), skipped.Load(), missing.Load(), failed.Load(), info.Messages)
		}
		return fmt.Sprintf("replay: moved %d, skipped %d, failed %d%s (of %d ready at the start)",
			moved.Load(), skipped.Load(), failed.Load(), missingCount(gone != nil, int(missing.Load())), info.Messages)
	})
	rep, err := patterns.Replay(rctx, mq, from, to, opts...)
	stop()
	if ferr := list.Flush(); ferr != nil && err == nil {
		err = ferr
	}
	if *dryRun {
		fmt.Fprintf(c.stdout, "dry run: would move %d, skipped %d, missing blob %d, failed %d; nothing was moved, %s is as it was\n",
			rep.Listed, rep.Skipped, rep.Missing, rep.Failed, from)
	} else {
		fmt.Fprintf(c.stdout, "moved %d, skipped %d, failed %d%s\n", rep.Moved, rep.Skipped, rep.Failed, missingCount(gone != nil, rep.Missing))
	}
	switch {
	case err != nil && context.Cause(rctx) == errTooManySkipped && *dryRun:
		return fmt.Errorf("acemq: replay -dry-run stopped after looking at %d messages of %s (each is held until the run ends, then put back); "+
			"nothing was moved. List fewer with -limit", maxSkipped, from)
	case err != nil && context.Cause(rctx) == errTooManySkipped:
		return fmt.Errorf("acemq: replay stopped after leaving %d messages at the head of %s (%s; each is held until the replay ends); "+
			"%d moved. Move or replay those first, or replay without -type", maxSkipped, from, leftKinds(rep), rep.Moved)
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("acemq: replay interrupted: %d moved; what was not moved is still on %s", rep.Moved, from)
	case err != nil:
		return err
	case want != nil && rep.Moved+rep.Listed+rep.Missing+rep.Failed == 0 && rep.Skipped > 0:
		return fmt.Errorf("acemq: replay: no message on %s is of type %s (%d looked at, all left where they were)",
			from, strings.Join(slices.Sorted(maps.Keys(want)), " or "), rep.Skipped)
	}
	return nil
}

// destination is where a replayed message goes, as -dry-run lists it.
func destination(it patterns.ReplayItem) string {
	if it.Exchange != "" {
		return fmt.Sprintf("%s (exchange, key %s)", it.Exchange, safe(it.Key))
	}
	return it.RoutingKey
}

// missingCount is the report's count of messages left for a missing
// object, when -skip-missing-blob looked for them.
func missingCount(looked bool, n int) string {
	if !looked {
		return ""
	}
	return fmt.Sprintf(", missing blob %d", n)
}

// leftKinds says what the messages a replay left in place were.
func leftKinds(rep patterns.ReplayReport) string {
	var parts []string
	for _, k := range []struct {
		n    int
		what string
	}{{rep.Skipped, "of other types"}, {rep.Missing, "whose object is gone"}, {rep.Failed, "that could not be moved"}} {
		if k.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", k.n, k.what))
		}
	}
	return strings.Join(parts, ", ")
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

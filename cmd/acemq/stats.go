package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/internal/ordering"
	"github.com/acemq/acemq/transport"
)

// runStats prints the ready and consumer counts of each queue named and of
// the queues acemq derives from it; an ordered consumer's queue gets
// orderedStats instead. AMQP cannot list queues, so the retry
// tiers are looked up by name: those of the default retry policy (1s, 5s,
// 30s, 2m) and those of the delays -delays adds, and the output says which
// every time. A queue that does not exist is shown as absent; a named
// queue that does not exist (a typo, say) makes the command fail once the
// table is printed.
func runStats(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("stats", "QUEUE...", "Ready and consumer counts of each queue, its .dlq, .parked and retry tiers.")
	var delays durations
	fs.Var(&delays, "delays", "more retry `delays`, comma-separated (1s,5s,30s,2m), to find tiers by besides the default policy's")
	queues, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(queues) == 0 {
		return usagef("stats: name at least one queue")
	}
	mq, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer mq.Close()

	var plain []string
	for _, q := range queues {
		ordered, err := isOrdered(ctx, mq, q)
		if err != nil {
			return err
		}
		if !ordered {
			plain = append(plain, q)
			continue
		}
		if err := orderedStats(ctx, c, mq, q); err != nil {
			return err
		}
	}
	if len(plain) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tROLE\tREADY\tCONSUMERS")
	var notes, missing []string
	for _, q := range plain {
		var tiers, absentTiers []string
		for _, m := range family(q, slices.Concat(acemq.DefaultRetryPolicy().Delays, delays)) {
			info, err := mq.Transport().Inspect(ctx, m.name)
			if m.tier {
				tiers = append(tiers, m.name)
			}
			switch {
			case errors.Is(err, transport.ErrNotFound):
				fmt.Fprintf(tw, "%s\t%s\tabsent\t\n", m.name, m.role)
				if m.tier {
					absentTiers = append(absentTiers, m.name)
				}
				if m.name == q {
					missing = append(missing, q)
				}
			case err != nil:
				_ = tw.Flush()
				return fmt.Errorf("acemq: stats: %w", err)
			default:
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", m.name, m.role, info.Messages, info.Consumers)
			}
		}
		if len(tiers) > 0 && len(absentTiers) == len(tiers) {
			notes = append(notes, fmt.Sprintf("no retry tiers of %s found; looked for %s. "+
				"A consumer with other retry delays has other tiers: name them with -delays (say -delays 10s,1m)",
				q, strings.Join(tiers, ", ")))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	looked := "the default retry policy's tiers (1s, 5s, 30s, 2m0s)"
	if len(delays) > 0 {
		looked += " and -delays' (" + delays.String() + ")"
	}
	fmt.Fprintf(c.stdout, "Retry tiers looked for: %s; a consumer with other delays has other tiers: name them with -delays.\n", looked)
	for _, n := range notes {
		fmt.Fprintln(c.stdout, n)
	}
	if err := delayStats(ctx, mq, c.stdout); err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("acemq: stats: no queue named %s (the table shows the names looked for)", strings.Join(missing, ", "))
	}
	return nil
}

// member is one queue of a work queue's family and what it is for.
type member struct {
	name, role string
	tier       bool // a retry tier, found by a guessed delay
}

// family lists queue, its dead-letter and parking queues and one retry
// tier per distinct delay, shortest first, as NewConsumer declares them.
func family(queue string, delays []time.Duration) []member {
	f := []member{
		{queue, "work", false},
		{acemq.DeadLetterQueue(queue), "dead letters", false},
		{acemq.ParkingQueue(queue), "parked", false},
	}
	ds := slices.Clone(delays)
	slices.Sort(ds)
	for _, d := range slices.Compact(ds) {
		f = append(f, member{acemq.RetryQueue(queue, d), "retry after " + d.String(), true})
	}
	return f
}

// durations is a comma-separated list of positive durations, as a flag.
type durations []time.Duration

func (d *durations) String() string {
	if d == nil {
		return ""
	}
	s := make([]string, len(*d))
	for i, v := range *d {
		s[i] = v.String()
	}
	return strings.Join(s, ",")
}

// Set adds the delays in v to the list; the flag may be given again.
func (d *durations) Set(v string) error {
	out := *d
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		p, err := time.ParseDuration(part)
		if err != nil {
			return fmt.Errorf("%q is not a duration (say 1s, 5s, 2m)", part)
		}
		if p <= 0 {
			return fmt.Errorf("delay %s is not positive", p)
		}
		out = append(out, p)
	}
	*d = out
	return nil
}

// isOrdered reports whether q is an ordered consumer's: no queue q, and a
// partition {q}.p0.
func isOrdered(ctx context.Context, mq *acemq.Conn, q string) (bool, error) {
	t := mq.Transport()
	if _, err := t.Inspect(ctx, q); !errors.Is(err, transport.ErrNotFound) {
		if err != nil {
			return false, fmt.Errorf("acemq: stats: %w", err)
		}
		return false, nil
	}
	_, err := t.Inspect(ctx, acemq.PartitionQueue(q, 0))
	switch {
	case errors.Is(err, transport.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("acemq: stats: %w", err)
	}
	return true, nil
}

// maxPartitionsShown bounds the partitions stats looks for.
const maxPartitionsShown = 1024

// orderedStats prints an ordered queue: each partition (ready, the unacked
// and the active instance, as the instances' statuses in {q}.status
// tell), .dlq, .parked, the instances and the blocked keys.
func orderedStats(ctx context.Context, c *cli, mq *acemq.Conn, q string) error {
	t := mq.Transport()
	statuses, err := ordering.ReadStatus(ctx, t, q)
	if err != nil {
		return fmt.Errorf("acemq: stats: %w", err)
	}
	holder := map[int]ordering.Status{}
	for _, s := range statuses {
		for _, i := range s.Partitions {
			if old, ok := holder[i]; !ok || s.Time.After(old.Time) {
				holder[i] = s
			}
		}
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s: ordered\n", q)
	fmt.Fprintln(tw, "QUEUE\tROLE\tREADY\tUNACKED\tCONSUMERS\tACTIVE")
	parts := 0
	for i := range maxPartitionsShown {
		info, err := t.Inspect(ctx, acemq.PartitionQueue(q, i))
		if errors.Is(err, transport.ErrNotFound) {
			break
		}
		if err != nil {
			_ = tw.Flush()
			return fmt.Errorf("acemq: stats: %w", err)
		}
		parts++
		unacked, active := "?", "none"
		if s, ok := holder[i]; ok {
			unacked, active = fmt.Sprint(s.Unacked[i]), s.Instance
		}
		fmt.Fprintf(tw, "%s\tpartition %d\t%d\t%s\t%d\t%s\n", info.Name, i, info.Messages, unacked, info.Consumers, active)
	}
	for _, m := range []member{{acemq.DeadLetterQueue(q), "dead letters", false}, {acemq.ParkingQueue(q), "parked", false}} {
		info, err := t.Inspect(ctx, m.name)
		switch {
		case errors.Is(err, transport.ErrNotFound):
			fmt.Fprintf(tw, "%s\t%s\tabsent\t\t\t\n", m.name, m.role)
		case err != nil:
			_ = tw.Flush()
			return fmt.Errorf("acemq: stats: %w", err)
		default:
			fmt.Fprintf(tw, "%s\t%s\t%d\t\t%d\t\n", m.name, m.role, info.Messages, info.Consumers)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%s, %s (the instances' statuses in %s, each about every %v)\n",
		plural(parts, "partition"), plural(len(statuses), "instance"), ordering.StatusQueue(q), ordering.StatusPeriod)
	if len(statuses) > 0 {
		tw = tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "INSTANCE\tPARTITIONS\tUNACKED\tSEEN")
		for _, s := range statuses {
			n := 0
			for _, u := range s.Unacked {
				n += u
			}
			ps := make([]string, len(s.Partitions))
			for i, p := range s.Partitions {
				ps[i] = fmt.Sprint(p)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", safe(s.Instance), strings.Join(ps, ","), n, s.Time.UTC().Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	keys, err := acemq.BlockedKeys(ctx, mq, q)
	if err != nil {
		fmt.Fprintf(c.stdout, "blocked keys: not known (%v)\n", err)
		return nil
	}
	if len(keys) == 0 {
		fmt.Fprintln(c.stdout, "no blocked keys")
		return nil
	}
	tw = tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BLOCKED KEY\tHELD\tSINCE\tMESSAGE")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", safe(k.Key), k.Held, k.Since.UTC().Format(time.RFC3339), safe(k.MessageID))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%d blocked (acemq keys list %s for the reasons)\n", len(keys), q)
	return nil
}

package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/acemq/acemq"
)

// maxReasonShown bounds the reason printed per blocked key.
const maxReasonShown = 80

// runKeys lists the keys an ordered consumer of a queue has blocked, or
// releases one: its held messages are then handled, in order, by whichever
// instance holds its partition.
//
//	acemq keys list QUEUE
//	acemq keys release QUEUE KEY
func runKeys(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("keys", "list QUEUE | release QUEUE KEY",
		"List the blocked keys of an ordered queue, or release one so its held messages run.")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0 || (pos[0] != "list" && pos[0] != "release"):
		return usagef("keys: say list or release")
	case pos[0] == "list" && len(pos) != 2:
		return usagef("keys list: name exactly one queue")
	case pos[0] == "release" && len(pos) != 3:
		return usagef("keys release: name the queue and the key")
	case pos[0] == "release" && pos[2] == "":
		return usagef("keys release: the key is empty")
	}
	mq, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer mq.Close()
	queue := pos[1]
	if pos[0] == "release" {
		if err := acemq.ReleaseKey(ctx, mq, queue, pos[2]); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "released key %s of %s: its held messages run next, in order\n", safe(pos[2]), safe(queue))
		return nil
	}
	keys, err := acemq.BlockedKeys(ctx, mq, queue)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		fmt.Fprintf(c.stdout, "%s: no blocked keys\n", queue)
		return nil
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tHELD\tSINCE\tMESSAGE\tREASON")
	for _, k := range keys {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", safe(k.Key), k.Held, k.Since.UTC().Format(time.RFC3339), safe(k.MessageID), safe(clip(k.Reason, maxReasonShown)))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%d blocked; release one with: acemq keys release %s KEY\n", len(keys), queue)
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
)

// maxReasonShown bounds the reason printed per blocked key.
const maxReasonShown = 80

// runKeys lists the keys an ordered consumer of a queue has blocked, or
// releases one: its held messages are then handled, in order, by whichever
// instance holds its partition; with -rerun the message that blocked it
// runs first, with -skip (and by default) it stays where it went.
//
//	acemq keys list QUEUE
//	acemq keys release [-rerun|-skip] QUEUE KEY
func runKeys(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("keys", "list QUEUE | release [-rerun|-skip] QUEUE KEY",
		"List the blocked keys of an ordered queue, or release one so its held messages run.")
	rerun := fs.Bool("rerun", false, "release: run the message that blocked the key first (from .dlq or .parked), then the held ones")
	skip := fs.Bool("skip", false, "release: run the held messages only; the message that blocked the key stays in .dlq or .parked, which the output names (the default)")
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
	case *rerun && *skip:
		return usagef("keys release: say -rerun or -skip, not both")
	case pos[0] == "list" && (*rerun || *skip):
		return usagef("keys list: -rerun and -skip are for keys release")
	}
	mq, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer mq.Close()
	queue := pos[1]
	if pos[0] == "release" {
		return releaseKey(ctx, c, mq, queue, pos[2], *rerun)
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

// releaseKey releases key of queue: with rerun the message that blocked it
// runs first; otherwise (-skip, or no flag) it stays where the consumer put
// it, and the output names that queue ({queue}.dlq or {queue}.parked), the
// message's ID and how to run it.
func releaseKey(ctx context.Context, c *cli, mq *acemq.Conn, queue, key string, rerun bool) error {
	if rerun {
		if err := acemq.ReleaseKey(ctx, mq, queue, key, acemq.RerunFailed()); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "released key %s of %s: the message that blocked it runs next, then its held messages, in order\n", safe(key), safe(queue))
		return nil
	}
	keys, err := acemq.BlockedKeys(ctx, mq, queue)
	if err != nil {
		return err
	}
	var failed string
	for _, k := range keys {
		if k.Key == key {
			failed = k.MessageID
		}
	}
	if err := acemq.ReleaseKey(ctx, mq, queue, key, acemq.SkipFailed()); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "released key %s of %s: its held messages run next, in order\n", safe(key), safe(queue))
	if failed == "" {
		return nil
	}
	where, err := findMessage(ctx, mq, failed, acemq.DeadLetterQueue(queue), acemq.ParkingQueue(queue))
	if err != nil {
		return err
	}
	if where == "" {
		fmt.Fprintf(c.stdout, "message %s, which blocked it, is in neither %s nor %s\n", safe(failed), acemq.DeadLetterQueue(queue), acemq.ParkingQueue(queue))
		return nil
	}
	fmt.Fprintf(c.stdout, "message %s, which blocked it, stays in %s; it was skipped (acemq replay %s %s runs it after the key's newer messages; acemq keys release -rerun runs it first, while a key is blocked)\n",
		safe(failed), where, where, safe(queue))
	return nil
}

// findMessage returns the first of queues holding a message with ID id,
// or "". It takes each message with Get and gives them all back, last
// first, so they stay where they were.
func findMessage(ctx context.Context, mq *acemq.Conn, id string, queues ...string) (string, error) {
	t := mq.Transport()
	for _, q := range queues {
		info, err := t.Inspect(ctx, q)
		if errors.Is(err, transport.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("acemq: looking for message %s in %s: %w", id, q, err)
		}
		found, err := func() (bool, error) {
			var taken []transport.Delivery
			defer func() {
				for i := len(taken) - 1; i >= 0; i-- {
					_ = taken[i].Nack(true)
				}
			}()
			for range info.Messages {
				d, ok, err := t.Get(ctx, q)
				if err != nil {
					return false, fmt.Errorf("acemq: looking for message %s in %s: %w", id, q, err)
				}
				if !ok {
					return false, nil
				}
				taken = append(taken, d)
				if d.MessageID == id {
					return true, nil
				}
			}
			return false, nil
		}()
		if err != nil {
			return "", err
		}
		if found {
			return q, nil
		}
	}
	return "", nil
}

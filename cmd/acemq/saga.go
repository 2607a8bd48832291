package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
)

// runSaga shows the instances of a saga, read from its table in the
// database; it talks to the database, not the broker.
//
//	acemq saga show -db URL NAME ID
//	acemq saga list -db URL NAME [-open] [-limit N]
func runSaga(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("saga", "show NAME ID | list NAME [-open] [-limit N]  [-db URL]",
		"Show one instance of a saga (its state as JSON, version, done, times), or list its instances.")
	dbURL := fs.String("db", "", "the database: postgres://... or sqlite:PATH (default $ACEMQ_OUTBOX_DB)")
	open := fs.Bool("open", false, "list: only the instances not completed")
	limit := fs.Int("limit", 20, "list: at most this many instances, the least recently updated first (1 to 1000)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0 || (pos[0] != "show" && pos[0] != "list"):
		return usagef("saga: say show or list")
	case pos[0] == "show" && len(pos) != 3:
		return usagef("saga show takes a saga's name and a correlation ID, not %q", pos[1:])
	case pos[0] == "list" && len(pos) != 2:
		return usagef("saga list takes a saga's name, not %q", pos[1:])
	case pos[0] == "list" && (*limit < 1 || *limit > 1000):
		return usagef("saga list: -limit must be between 1 and 1000, not %d", *limit)
	}
	if *dbURL == "" {
		*dbURL = c.getenv("ACEMQ_OUTBOX_DB")
	}
	db, dialect, err := c.database(ctx, "saga", *dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	// No password of the database's URL in the output. The outbox and
	// saga packages' errors say "outbox:" and "saga:" already.
	fail := func(err error) error { return errors.New(scrub(err.Error(), *dbURL)) }
	o, err := outbox.New(db, dialect)
	if err != nil {
		return fail(err)
	}
	defer o.Close()
	s, err := saga.New[json.RawMessage](o, pos[1])
	if err != nil {
		return fail(err)
	}
	defer s.Close()

	if pos[0] == "show" {
		snap, err := s.Get(ctx, pos[2])
		if err != nil {
			return fail(err)
		}
		var state bytes.Buffer
		if err := json.Indent(&state, snap.State, "", "  "); err != nil {
			return fmt.Errorf("acemq: saga: the state of %q is not JSON: %w", snap.ID, err)
		}
		fmt.Fprintf(c.stdout, "saga:     %s (table %s)\n", s.Name(), s.TableName())
		fmt.Fprintf(c.stdout, "id:       %q\n", snap.ID)
		fmt.Fprintf(c.stdout, "version:  %d\n", snap.Version)
		fmt.Fprintf(c.stdout, "done:     %t\n", snap.Done)
		fmt.Fprintf(c.stdout, "created:  %s\n", snap.Created.Format(time.RFC3339Nano))
		fmt.Fprintf(c.stdout, "updated:  %s\n", snap.Updated.Format(time.RFC3339Nano))
		fmt.Fprintln(c.stdout, "state:")
		for line := range strings.Lines(state.String()) { // a state's bytes must not drive the terminal
			fmt.Fprintln(c.stdout, safe(strings.TrimSuffix(line, "\n")))
		}
		return nil
	}
	openCount, err := s.CountOpen(ctx)
	if err != nil {
		return fail(err)
	}
	snaps, err := s.List(ctx, saga.ListOptions{Open: *open, Limit: *limit})
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(c.stdout, "%s: %d open\n", s.Name(), openCount)
	if len(snaps) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tVERSION\tDONE\tCREATED\tUPDATED\tSTATE")
	for _, snap := range snaps {
		fmt.Fprintf(tw, "%q\t%d\t%t\t%s\t%s\t%s\n", snap.ID, snap.Version, snap.Done,
			snap.Created.Format(time.RFC3339), snap.Updated.Format(time.RFC3339), safe(clip(compact(snap.State), maxErrorShown)))
	}
	switch {
	case *open && openCount > int64(len(snaps)):
		fmt.Fprintf(tw, "(%d more open; -limit shows more)\n", openCount-int64(len(snaps)))
	case !*open && len(snaps) == *limit:
		fmt.Fprintf(tw, "(the first %d; -limit shows more, if there are)\n", *limit)
	}
	return tw.Flush()
}

// compact is a state's JSON on one line.
func compact(state json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, state); err != nil {
		return string(state)
	}
	return b.String()
}

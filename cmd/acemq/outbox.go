package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/acemq/acemq/internal/urls"
	"github.com/acemq/acemq/outbox"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver
)

// maxErrorShown bounds the last error printed per dead row.
const maxErrorShown = 120

// runOutbox shows and replays the dead-lettered rows of a transactional
// outbox table: those a relay gave up on after MaxAttempts failed
// publishes. It talks to the database, not the broker.
//
//	acemq outbox dead [-db URL] [-table T] [-n N]
//	acemq outbox replay [-db URL] [-table T] (ID... | -all)
func runOutbox(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("outbox", "dead|replay [ID...] [-db URL] [-table T] [-n N] [-all]",
		"Show the dead-lettered rows of an outbox table, or put them back to be relayed.")
	dbURL := fs.String("db", "", "the database: postgres://... or sqlite:PATH (default $ACEMQ_OUTBOX_DB)")
	table := fs.String("table", outbox.DefaultTable, "the outbox `table`")
	n := fs.Int("n", 20, "dead: list at most this many rows, oldest death first (1 to 1000)")
	all := fs.Bool("all", false, "replay: every dead row")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 || (pos[0] != "dead" && pos[0] != "replay") {
		return usagef("outbox: say dead or replay")
	}
	action, rest := pos[0], pos[1:]
	var ids []int64
	switch {
	case action == "dead" && len(rest) > 0:
		return usagef("outbox dead takes no arguments, not %q", rest)
	case action == "dead" && (*n < 1 || *n > 1000):
		return usagef("outbox dead: -n must be between 1 and 1000, not %d", *n)
	case action == "replay" && *all == (len(rest) > 0):
		return usagef("outbox replay: name the row IDs or give -all, not both")
	}
	for _, s := range rest {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < 1 {
			return usagef("outbox replay: %q is not a row ID", s)
		}
		ids = append(ids, id)
	}
	if *dbURL == "" {
		*dbURL = c.getenv("ACEMQ_OUTBOX_DB")
	}
	db, dialect, err := c.database(ctx, "outbox", *dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	// No password of the database's URL in the output. The outbox
	// package's errors say "outbox:" already.
	fail := func(err error) error { return errors.New(scrub(err.Error(), *dbURL)) }
	o, err := outbox.New(db, dialect, outbox.Table(*table))
	if err != nil {
		return fail(err)
	}
	defer o.Close()

	if action == "replay" {
		var revived int64
		if *all {
			revived, err = o.ReplayAll(ctx)
		} else {
			revived, err = o.Replay(ctx, ids...)
		}
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(c.stdout, "replayed %d dead rows of %s; a relay sends them now\n", revived, *table)
		return nil
	}
	pending, err := o.Pending(ctx)
	if err != nil {
		return fail(err)
	}
	dead, err := o.Dead(ctx)
	if err != nil {
		return fail(err)
	}
	rows, err := o.DeadRows(ctx, *n)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(c.stdout, "%s: %d pending, %d dead\n", *table, pending, dead)
	if len(rows) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMESSAGE ID\tEXCHANGE\tROUTING KEY\tATTEMPTS\tDIED\tLAST ERROR")
	for _, r := range rows {
		last := clip(r.LastError, maxErrorShown)
		fmt.Fprintf(tw, "%d\t%q\t%q\t%q\t%d\t%s\t%q\n", r.ID, r.MessageID, r.Exchange, r.RoutingKey, r.Attempts,
			r.Died.Format(time.RFC3339), last)
	}
	if int64(len(rows)) < dead {
		fmt.Fprintf(tw, "(%d more; -n shows more)\n", dead-int64(len(rows)))
	}
	return tw.Flush()
}

// database opens the database rawURL names for the command cmd (outbox or
// saga), as openDB does, and checks within -timeout that it answers; an
// error of the driver names cmd and shows no password of rawURL.
func (c *cli) database(ctx context.Context, cmd, rawURL string) (*sql.DB, outbox.Dialect, error) {
	db, dialect, err := openDB(cmd, rawURL)
	if err != nil {
		return nil, 0, err
	}
	if c.timeout <= 0 {
		_ = db.Close()
		return nil, 0, usagef("-timeout must be positive, not %s", c.timeout)
	}
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	err = db.PingContext(pctx)
	cancel()
	if err != nil {
		_ = db.Close()
		return nil, 0, fmt.Errorf("acemq: %s: %s", cmd, scrub(err.Error(), rawURL))
	}
	return db, dialect, nil
}

// openDB opens the database rawURL names for the command cmd (outbox or
// saga): postgres:// or postgresql:// with pgx, sqlite:PATH (or
// sqlite://PATH) with the pure-Go SQLite driver, with a busy timeout,
// since a relay or a consumer may be writing.
func openDB(cmd, rawURL string) (*sql.DB, outbox.Dialect, error) {
	switch {
	case rawURL == "":
		return nil, 0, usagef("%s: name the database with -db or $ACEMQ_OUTBOX_DB", cmd)
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		db, err := sql.Open("pgx", rawURL)
		return db, outbox.Postgres, err
	case strings.HasPrefix(rawURL, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(rawURL, "sqlite:"), "//")
		if path == "" {
			return nil, 0, usagef("%s: %q names no SQLite file", cmd, rawURL)
		}
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
		if err == nil {
			db.SetMaxOpenConns(1)
		}
		return db, outbox.SQLite, err
	}
	return nil, 0, usagef("%s: -db must start with postgres://, postgresql:// or sqlite:, not %q", cmd, urls.Redact(rawURL))
}

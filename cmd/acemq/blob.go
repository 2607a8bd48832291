package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/internal/urls"
	"github.com/acemq/acemq/transport"
)

// runBlob is `acemq blob sweep`: it deletes the expired objects of a
// store, and nothing else (blob.Sweep).
func runBlob(ctx context.Context, c *cli, args []string) error {
	if len(args) == 0 || args[0] != "sweep" {
		return usagef("blob: the subcommand is sweep")
	}
	fs := c.flags("blob sweep", "-store SPEC", "Delete the objects of a large-payload store whose expiry has passed.")
	spec := fs.String("store", "", "the store: dir:PATH, postgres://... or sqlite:PATH")
	table := fs.String("table", blob.DefaultSQLTable, "the object table of an SQL store")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("blob sweep: takes no arguments, only -store")
	}
	s, closeStore, err := openStore(ctx, "blob sweep", *spec, *table)
	if err != nil {
		return err
	}
	defer closeStore()
	n, err := blob.SweepCounted(ctx, s, time.Now(), nil)
	if err != nil {
		return fmt.Errorf("acemq: blob sweep: stopped after deleting %s: %s", plural(n, "expired object"), scrub(err.Error(), *spec))
	}
	fmt.Fprintf(c.stdout, "swept %s\n", plural(n, "expired object"))
	return nil
}

// openStore opens the store spec names: dir:PATH, or an SQL store in the
// database of a postgres://, postgresql:// or sqlite: URL (openDB).
func openStore(ctx context.Context, cmd, spec, table string) (blob.Store, func(), error) {
	switch {
	case spec == "":
		return nil, nil, usagef("%s: name the store with -store dir:PATH, postgres://... or sqlite:PATH", cmd)
	case strings.HasPrefix(spec, "dir:"):
		path := strings.TrimPrefix(strings.TrimPrefix(spec, "dir:"), "//")
		if path == "" {
			return nil, nil, usagef("%s: %q names no directory", cmd, spec)
		}
		s, err := blob.Dir(path)
		if err != nil {
			return nil, nil, fmt.Errorf("acemq: %s: %w", cmd, err)
		}
		return s, func() {}, nil
	}
	db, dialect, err := openDB(cmd, spec)
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return nil, nil, usagef("%s: -store must be dir:PATH, postgres://..., postgresql://... or sqlite:PATH, not %q", cmd, urls.Redact(spec))
		}
		return nil, nil, err
	}
	fail := func(err error) (blob.Store, func(), error) {
		_ = db.Close()
		return nil, nil, fmt.Errorf("acemq: %s: %s", cmd, scrub(err.Error(), spec))
	}
	if err := db.PingContext(ctx); err != nil {
		return fail(err)
	}
	s, err := blob.SQLDB(db, blob.SQLDialect(dialect), blob.SQLTable(table))
	if err != nil {
		return fail(err)
	}
	// A store named without -table, or with the wrong one, has no tables:
	// say so, and how to name them, before anything is swept or read.
	if err := s.CheckTables(ctx); err != nil {
		if errors.Is(err, blob.ErrNotMigrated) {
			_ = db.Close()
			return nil, nil, fmt.Errorf("acemq: %s: the store's table %s (with its chunks in %s) does not exist in this database; "+
				"pass -table NAME to name the table the store was created with (its chunk table is NAME_chunk)",
				cmd, s.TableName(), s.TableName()+"_chunk")
		}
		return fail(err)
	}
	return s, func() { _ = db.Close() }, nil
}

// checkObjects is replay's -store check: it looks at the messages at the
// head of queue (at most limit), holding them unacked, and prints each
// one whose Ref names an object the store no longer has; then it puts them
// all back, last first, so the queue keeps its order. It returns how many
// are gone.
func checkObjects(ctx context.Context, c *cli, mq *acemq.Conn, queue string, s blob.Store, limit int) (int, error) {
	var held []transport.Delivery
	defer func() {
		for i := len(held) - 1; i >= 0; i-- {
			_ = held[i].Nack(true) // a failed nack: the broker returns it when the channel closes
		}
	}()
	gone, missing := 0, blob.Missing(s)
	for len(held) < limit {
		d, ok, err := mq.Transport().Get(ctx, queue)
		if err != nil {
			return gone, fmt.Errorf("acemq: replay: looking at %s: %w", queue, err)
		}
		if !ok {
			break
		}
		held = append(held, d)
		what, err := missing(ctx, d.ContentType, d.Body)
		switch {
		case err != nil:
			return gone, fmt.Errorf("acemq: replay: message %s: %w", safe(d.MessageID), err)
		case what != "":
			gone++
			fmt.Fprintf(c.stdout, "gone: message %s names %s, which the store no longer has\n", safe(d.MessageID), safe(what))
		}
	}
	return gone, nil
}

func expiry(ref blob.Ref) string {
	if ref.Expires.IsZero() {
		return "none"
	}
	return ref.Expires.UTC().Format(time.RFC3339)
}

// blobLine is peek's line for a message that carries a Ref.
func blobLine(contentType string, body []byte) string {
	ref, ok := blob.RefOf(contentType, body)
	if !ok {
		return ""
	}
	return fmt.Sprintf("object %s, %d bytes, sha256 %s, expires %s", ref.ID, ref.Size, ref.SHA256, expiry(ref))
}

// reportGone is what replay -store does before it moves anything: it
// prints the messages of queue (its first ready ones, at most maxSkipped)
// whose object is gone, and how many.
func (c *cli) reportGone(ctx context.Context, mq *acemq.Conn, queue, spec, table string, ready int) error {
	s, closeStore, err := openStore(ctx, "replay", spec, table)
	if err != nil {
		return err
	}
	defer closeStore()
	gone, err := checkObjects(ctx, c, mq, queue, s, min(max(ready, 1), maxSkipped))
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%s whose object is gone (they will be dead-lettered again as gone)\n", plural(gone, "message"))
	return nil
}

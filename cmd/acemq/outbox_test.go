package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
)

// Order is what the outbox tests write.
type Order struct{ ID string }

// deadRows makes an outbox table in db with n rows a relay dead-lettered,
// one published and deleted, and returns the outbox; the table is dropped
// when the test ends.
func deadRows(t *testing.T, db *sql.DB, d outbox.Dialect, n int) *outbox.Outbox {
	t.Helper()
	ctx := context.Background()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	o, err := outbox.New(db, d, outbox.Table("cli_outbox_"+hex.EncodeToString(b[:])))
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := o.Drop(context.Background()); err != nil {
			t.Error(err)
		}
		_ = o.Close()
	})
	mq, err := acemq.Connect(ctx, acemqtest.Memory(t), acemq.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer mq.Close()
	if err := mq.Declare(ctx, acemq.Queue{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	lost := outbox.NewPublisher[Order](o, mq, "", "nowhere")
	for i := range n {
		if err := lost.Send(ctx, tx, Order{ID: fmt.Sprint(i)}, acemq.MessageID(fmt.Sprint("lost-", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := outbox.NewPublisher[Order](o, mq, "", "orders").Send(ctx, tx, Order{ID: "ok"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- outbox.NewRelay(o, mq, outbox.MaxAttempts(1), outbox.PollInterval(5*time.Millisecond),
			outbox.WithLogger(slog.New(slog.DiscardHandler))).Run(rctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		dead, err1 := o.Dead(ctx)
		pending, err2 := o.Pending(ctx)
		if err1 == nil && err2 == nil && dead == int64(n) && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %d dead (%v), %d pending (%v); want %d and 0", dead, err1, pending, err2, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return o
}

// outboxDatabases are the databases the outbox command is tried on.
var outboxDatabases = []struct {
	name    string
	dialect outbox.Dialect
	open    func(t *testing.T) (db *sql.DB, url string)
}{
	{"sqlite", outbox.SQLite, func(t *testing.T) (*sql.DB, string) {
		path := filepath.Join(t.TempDir(), "app.db")
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { _ = db.Close() })
		return db, "sqlite:" + path
	}},
	{"postgres", outbox.Postgres, func(t *testing.T) (*sql.DB, string) {
		url := acemqtest.Postgres(t)
		db, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db, url
	}},
}

func TestOutboxDeadAndReplay(t *testing.T) {
	t.Parallel()
	for _, od := range outboxDatabases {
		t.Run(od.name, func(t *testing.T) {
			t.Parallel()
			db, url := od.open(t)
			o := deadRows(t, db, od.dialect, 3)
			table := o.TableName()

			r := runCLI(t, "outbox", "dead", "-db", url, "-table", table, "-n", "2")
			if r.code != exitOK {
				t.Fatalf("dead: exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			for _, want := range []string{table + ": 0 pending, 3 dead", "MESSAGE ID", `"lost-0"`, `"nowhere"`, "(1 more; -n shows more)"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("dead does not show %q:\n%s", want, r.stdout)
				}
			}
			rows, err := o.DeadRows(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			r = runCLI(t, "outbox", "replay", fmt.Sprint(rows[0].ID), "-db", url, "-table", table)
			if r.code != exitOK || !strings.Contains(r.stdout, "replayed 1 dead rows") {
				t.Fatalf("replay ID: exit status %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			r = runCLI(t, "outbox", "replay", "-all", "-db", url, "-table", table)
			if r.code != exitOK || !strings.Contains(r.stdout, "replayed 2 dead rows") {
				t.Fatalf("replay -all: exit status %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			pending, err := o.Pending(context.Background())
			if err != nil || pending != 3 {
				t.Errorf("after the replays: %d pending (%v), want 3", pending, err)
			}
		})
	}
}

func TestOutboxUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []string
		env    string
		code   int
		stderr string
	}{
		{"no action", []string{"outbox", "-db", "sqlite:x.db"}, "", exitUsage, "say dead or replay"},
		{"unknown action", []string{"outbox", "purge", "-db", "sqlite:x.db"}, "", exitUsage, "say dead or replay"},
		{"no database", []string{"outbox", "dead"}, "", exitUsage, "name the database with -db"},
		{"unknown database", []string{"outbox", "dead", "-db", "mysql://u:secret@h/db"}, "", exitUsage, `not "mysql://u:xxxxx@h/db"`},
		{"replay nothing", []string{"outbox", "replay", "-db", "sqlite:x.db"}, "", exitUsage, "name the row IDs or give -all"},
		{"replay both", []string{"outbox", "replay", "1", "-all", "-db", "sqlite:x.db"}, "", exitUsage, "not both"},
		{"replay a bad ID", []string{"outbox", "replay", "one", "-db", "sqlite:x.db"}, "", exitUsage, `"one" is not a row ID`},
		{"dead n zero", []string{"outbox", "dead", "-n", "0", "-db", "sqlite:x.db"}, "", exitUsage, "-n must be between 1 and 1000"},
		{"bad table", []string{"outbox", "dead", "-table", "a-b", "-db", "sqlite:" + filepath.Join(t.TempDir(), "x.db")}, "", exitFailure, `outbox: table name "a-b" is not a plain SQL identifier`},
		{"database from the environment", []string{"outbox", "dead"}, "sqlite:" + filepath.Join(t.TempDir(), "y.db"), exitFailure, "no such table"},
		{"unreachable postgres", []string{"outbox", "dead", "-timeout", "2s", "-db", "postgres://u:secret@127.0.0.1:1/db"}, "", exitFailure, "acemq: outbox: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut strings.Builder
			c := &cli{stdout: &out, stderr: &errOut, getenv: func(k string) string {
				if k == "ACEMQ_OUTBOX_DB" {
					return tt.env
				}
				return ""
			}, timeout: 10 * time.Second}
			code := c.report(runOutbox(context.Background(), c, tt.args[1:]))
			if code != tt.code {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, tt.code, errOut.String())
			}
			if !strings.Contains(errOut.String(), tt.stderr) {
				t.Errorf("stderr does not say %q:\n%s", tt.stderr, errOut.String())
			}
			if strings.Contains(errOut.String()+out.String(), "secret") {
				t.Errorf("a password was printed:\n%s", errOut.String())
			}
		})
	}
}

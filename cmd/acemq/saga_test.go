package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
)

// Checkout is the state of the saga the command is tried on.
type Checkout struct {
	Status string `json:"status"`
	Total  int    `json:"total"`
}

// sagaInstances makes a saga of the test's own in db with the instances
// o-1 (completed), o-2 and o-3 (open), through its handler, and returns
// its name; its tables are dropped when the test ends.
func sagaInstances(t *testing.T, db *sql.DB, d outbox.Dialect) string {
	t.Helper()
	ctx := context.Background()
	o, err := outbox.New(db, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Close() })
	name := fmt.Sprintf("cli_%d", time.Now().UnixNano())
	in, err := outbox.NewInbox(db, d, outbox.Table(name+"_inbox"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := saga.New[Checkout](o, name, saga.WithInbox(in))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Drop(context.Background()); err != nil {
			t.Error(err)
		}
		if err := in.Drop(context.Background()); err != nil {
			t.Error(err)
		}
		_ = s.Close()
	})
	h := saga.Handle(s, func(m *acemq.Message[Checkout]) string { return m.Envelope.CorrelationID },
		func(_ context.Context, in *saga.Instance[Checkout], m *acemq.Message[Checkout]) error {
			in.State = m.Payload
			if m.Payload.Status == "shipped" {
				in.Complete()
			}
			return nil
		}, saga.Starts())
	for i, m := range []struct {
		id string
		c  Checkout
	}{
		{"o-1", Checkout{Status: "placed", Total: 10}},
		{"o-1", Checkout{Status: "shipped", Total: 10}},
		{"o-2", Checkout{Status: "awaiting payment", Total: 25}},
		{"o-3", Checkout{Status: "awaiting \x1b[31mpayment", Total: 7}},
	} {
		ack := h(ctx, &acemq.Message[Checkout]{Payload: m.c, Envelope: &acemq.Envelope{ID: fmt.Sprint("m-", i), CorrelationID: m.id}})
		if ack.Kind() != acemq.AckDone {
			t.Fatalf("message %d: %v %v", i, ack, ack.Err())
		}
	}
	return name
}

func TestSagaShowAndList(t *testing.T) {
	t.Parallel()
	for _, od := range outboxDatabases {
		t.Run(od.name, func(t *testing.T) {
			t.Parallel()
			db, url := od.open(t)
			name := sagaInstances(t, db, od.dialect)

			r := runCLI(t, "saga", "show", "-db", url, name, "o-1")
			if r.code != exitOK {
				t.Fatalf("show: exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			for _, want := range []string{"saga:     " + name + " (table acemq_saga_" + name + ")", `id:       "o-1"`,
				"version:  2", "done:     true", "created:  20", "updated:  20", "state:\n{\n", `"status": "shipped"`, `"total": 10`} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("show does not say %q:\n%s", want, r.stdout)
				}
			}

			r = runCLI(t, "saga", "list", name, "-db", url)
			if r.code != exitOK {
				t.Fatalf("list: exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			for _, want := range []string{name + ": 2 open", "ID", "VERSION", `"o-1"`, `"o-2"`, `"o-3"`, `"status":"awaiting payment"`, `"total":25`} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("list does not show %q:\n%s", want, r.stdout)
				}
			}
			if strings.Contains(r.stdout, "\x1b") {
				t.Errorf("list printed a state's escape sequence:\n%q", r.stdout)
			}

			r = runCLI(t, "saga", "list", name, "-open", "-limit", "1", "-db", url)
			if r.code != exitOK {
				t.Fatalf("list -open: exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			if strings.Contains(r.stdout, `"o-1"`) || !strings.Contains(r.stdout, `"o-2"`) || !strings.Contains(r.stdout, "(1 more open; -limit shows more)") {
				t.Errorf("list -open -limit 1 shows:\n%s", r.stdout)
			}

			r = runCLI(t, "saga", "show", name, "o-3", "-db", url)
			if r.code != exitOK || strings.Contains(r.stdout, "\x1b") || !strings.Contains(r.stdout, `\u001b[31m`) {
				t.Errorf("show of a state with an escape sequence: exit status %d:\n%q", r.code, r.stdout)
			}

			r = runCLI(t, "saga", "show", name, "o-404", "-db", url)
			if want := fmt.Sprintf("saga: no saga %q with correlation ID \"o-404\"", name); r.code != exitFailure || r.stderr != want+"\n" {
				t.Errorf("show of a missing instance: exit status %d, stderr %q; want 1 and %q", r.code, r.stderr, want)
			}
		})
	}
}

func TestSagaUsage(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	tests := []struct {
		name   string
		args   []string
		env    string
		code   int
		stderr string
	}{
		{"no action", []string{"saga", "-db", sqlite}, "", exitUsage, "say show or list"},
		{"unknown action", []string{"saga", "drop", "checkout", "-db", sqlite}, "", exitUsage, "say show or list"},
		{"show without an ID", []string{"saga", "show", "checkout", "-db", sqlite}, "", exitUsage, "takes a saga's name and a correlation ID"},
		{"list without a name", []string{"saga", "list", "-db", sqlite}, "", exitUsage, "saga list takes a saga's name"},
		{"list limit zero", []string{"saga", "list", "checkout", "-limit", "0", "-db", sqlite}, "", exitUsage, "-limit must be between 1 and 1000"},
		{"no database", []string{"saga", "list", "checkout"}, "", exitUsage, "saga: name the database with -db"},
		{"unknown database", []string{"saga", "list", "checkout", "-db", "mysql://u:secret@h/db"}, "", exitUsage, `not "mysql://u:xxxxx@h/db"`},
		{"bad name", []string{"saga", "list", "Check-out", "-db", sqlite}, "", exitFailure, `the name "Check-out" is not made of a-z, 0-9 and _`},
		{"no table", []string{"saga", "list", "checkout"}, sqlite, exitFailure, "no such table: acemq_saga_checkout"},
		{"unreachable postgres", []string{"saga", "list", "checkout", "-timeout", "2s", "-db", "postgres://u:secret@127.0.0.1:1/db"}, "", exitFailure, "saga:"},
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
			code := c.report(runSaga(context.Background(), c, tt.args[1:]))
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

package console_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/console"
	"github.com/acemq/acemq/outbox"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

type order struct{ ID string }

// deadOutbox is an SQLite outbox with n rows its relay dead-lettered (a
// publish to a queue that does not exist, with MaxAttempts 1).
func deadOutbox(t *testing.T, c *acemq.Conn, n int) *outbox.Outbox {
	t.Helper()
	ctx := ctxT(t)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	o, err := outbox.New(db, outbox.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Close() })
	if err := o.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	lost := outbox.NewPublisher[order](o, c, "", "nowhere")
	for i := range n {
		if err := lost.Send(ctx, tx, order{ID: fmt.Sprint(i)}, acemq.MessageID(fmt.Sprint("lost-", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- outbox.NewRelay(o, c, outbox.MaxAttempts(1), outbox.PollInterval(5*time.Millisecond), outbox.WithLogger(quiet)).Run(rctx)
	}()
	defer func() { stop(); <-done }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if dead, err := o.Dead(ctx); err == nil && dead == int64(n) {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outbox's %d rows did not die", n)
		}
	}
}

// TestOutboxDeadRows lists the outbox's dead rows and puts them back for
// the relay; without Write the replay is refused.
func TestOutboxDeadRows(t *testing.T) {
	t.Parallel()
	c := connect(t, brokers[0].url(t))
	o := deadOutbox(t, c, 3)
	ro := server(t, c, console.Outbox(o))
	var got struct {
		Configured bool
		Dead       int64
		Rows       []struct{ MessageID, RoutingKey string }
	}
	getJSON(t, ro, "/api/outbox", &got)
	if !got.Configured || got.Dead != 3 || len(got.Rows) != 3 || got.Rows[0].RoutingKey != "nowhere" {
		t.Fatalf("outbox %+v, want 3 dead rows for nowhere", got)
	}
	if code, _ := post(t, ro, "/api/outbox/replay", csrfOf(t, ro), map[string]any{"all": true}); code != http.StatusForbidden {
		t.Errorf("outbox replay on a read-only console: %d, want 403", code)
	}
	rw := server(t, c, console.Outbox(o), console.Write())
	if code, body := post(t, rw, "/api/outbox/replay", csrfOf(t, rw), map[string]any{"all": true}); code != http.StatusOK || body != "{\"revived\":3}\n" {
		t.Fatalf("outbox replay: %d %q", code, body)
	}
	if dead, err := o.Dead(ctxT(t)); err != nil || dead != 0 {
		t.Errorf("%d dead rows after the replay (%v), want 0", dead, err)
	}
}

// TestOutboxReplayChosenRows puts back the rows named by ID, and only
// those: an ID that is not a dead row is left alone, and a request must
// name IDs or all, not both nor neither.
func TestOutboxReplayChosenRows(t *testing.T) {
	t.Parallel()
	c := connect(t, brokers[0].url(t))
	o := deadOutbox(t, c, 3)
	s := server(t, c, console.Outbox(o), console.Write())
	csrf := csrfOf(t, s)
	var before struct{ Rows []struct{ ID int64 } }
	getJSON(t, s, "/api/outbox", &before)
	if len(before.Rows) != 3 {
		t.Fatalf("%d dead rows listed, want 3", len(before.Rows))
	}
	chosen := before.Rows[1].ID
	for _, tc := range []struct {
		name string
		req  map[string]any
	}{
		{"both", map[string]any{"ids": []int64{chosen}, "all": true}},
		{"neither", map[string]any{}},
	} {
		if code, body := post(t, s, "/api/outbox/replay", csrf, tc.req); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.name, code, body)
		}
	}
	if code, body := post(t, s, "/api/outbox/replay", csrf, map[string]any{"ids": []int64{chosen, chosen + 1000}}); code != http.StatusOK || body != "{\"revived\":1}\n" {
		t.Fatalf("outbox replay of row %d: %d %q, want 1 revived", chosen, code, body)
	}
	var after struct {
		Dead int64
		Rows []struct{ ID int64 }
	}
	getJSON(t, s, "/api/outbox", &after)
	if after.Dead != 2 || len(after.Rows) != 2 || after.Rows[0].ID != before.Rows[0].ID || after.Rows[1].ID != before.Rows[2].ID {
		t.Errorf("after replaying row %d: %+v, want rows %d and %d dead", chosen, after, before.Rows[0].ID, before.Rows[2].ID)
	}
	if pending, err := o.Pending(ctxT(t)); err != nil || pending != 1 {
		t.Errorf("%d rows pending (%v), want the replayed one", pending, err)
	}
}

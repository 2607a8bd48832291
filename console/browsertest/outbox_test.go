package browsertest_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/console"
	"github.com/acemq/acemq/outbox"
	"github.com/chromedp/chromedp"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

type order struct{ ID string }

// TestOperatorReplaysOutboxRowsAndSeesDelayed: in a headless Chromium, on
// a broker of its own, an operator sees the delayed messages in the
// overview, with one unroutable flagged, then replays one dead outbox row
// with its own button and another by selecting it; the rows leave the
// list, and the outbox has them pending for the relay, the third still
// dead.
func TestOperatorReplaysOutboxRowsAndSeesDelayed(t *testing.T) {
	exe := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := acemqtest.Memory(t)
	mq, err := acemq.Connect(ctx, url, acemq.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mq.Close() })
	o := deadOutbox(t, ctx, mq, 3)
	dead, err := o.DeadRows(ctx, 10)
	if err != nil || len(dead) != 3 {
		t.Fatalf("dead rows %v %v, want 3", dead, err)
	}

	// One delayed message waiting an hour, one unroutable at its due time.
	q := acemqtest.QueueName(t, "later")
	if err := mq.Declare(ctx, acemq.Queue{Name: q}); err != nil {
		t.Fatal(err)
	}
	if err := acemq.NewPublisher[acemq.Raw](mq, "", q).Send(ctx, acemq.Raw(`{}`), acemq.After(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := acemq.NewPublisher[acemq.Raw](mq, "", "nowhere").Send(ctx, acemq.Raw(`{}`), acemq.After(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if info, err := mq.Transport().Inspect(ctx, "acemq.delay.unroutable"); err == nil && info.Messages == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the delayed message to nowhere did not become unroutable")
		}
	}

	srv := httptest.NewServer(console.Handler(mq, console.Write(), console.Queues(q), console.Outbox(o), console.Logger(quiet)))
	defer srv.Close()
	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1200, 800))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	wait := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(20*time.Second))
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	gone := func(id int64) string {
		return fmt.Sprintf(`!document.querySelector('tr.outbox-row[data-id="%d"]') && document.getElementById('outbox-result').className === 'done'`, id)
	}
	first, second, third := dead[0].ID, dead[1].ID, dead[2].ID
	var waiting, warning, unroutableClass, replayed, selected string
	var listed []string
	err = chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(css(`#delayed-summary`)),
		into(chromedp.TextContent(css(`#delayed-waiting`)), &waiting),
		into(chromedp.TextContent(css(`#delayed-unroutable`)), &warning),
		into(chromedp.Evaluate[string](`document.getElementById('delay-unroutable').className`), &unroutableClass),
		chromedp.WaitVisible(css(fmt.Sprintf(`button.outbox-replay[data-id="%d"]`, first))),
		chromedp.Click(css(fmt.Sprintf(`button.outbox-replay[data-id="%d"]`, first))),
		wait(gone(first)),
		into(chromedp.TextContent(css(`#outbox-result`)), &replayed),
		chromedp.Click(css(fmt.Sprintf(`input.outbox-pick[value="%d"]`, second))),
		chromedp.Click(css(`#outbox-replay-selected`)),
		wait(gone(second)),
		into(chromedp.TextContent(css(`#outbox-result`)), &selected),
		into(chromedp.Evaluate[[]string](`[...document.querySelectorAll('tr.outbox-row')].map(r => r.dataset.id)`), &listed),
	)
	if err != nil {
		t.Fatalf("in the browser: %v", err)
	}
	bcancel()
	acancel()
	srv.Close()

	if waiting != "1" || !strings.Contains(warning, "1 delayed message found no queue") || unroutableClass != "alert" {
		t.Errorf("delayed: %q waiting, warning %q, unroutable row class %q; want 1, the warning, alert", waiting, warning, unroutableClass)
	}
	if want := fmt.Sprintf("1 of 1 rows put back for the relay (%d)", first); replayed != want {
		t.Errorf("the row's replay said %q, want %q", replayed, want)
	}
	if want := fmt.Sprintf("1 of 1 rows put back for the relay (%d)", second); selected != want {
		t.Errorf("the selected replay said %q, want %q", selected, want)
	}
	if len(listed) != 1 || listed[0] != strconv.FormatInt(third, 10) {
		t.Errorf("rows listed %v, want only %d", listed, third)
	}
	left, err := o.DeadRows(ctx, 10)
	if err != nil || len(left) != 1 || left[0].ID != third {
		t.Errorf("dead rows %+v %v, want only %d", left, err, third)
	}
	if pending, err := o.Pending(ctx); err != nil || pending != 2 {
		t.Errorf("%d rows pending (%v), want the 2 replayed", pending, err)
	}
}

// deadOutbox is an SQLite outbox with n rows its relay dead-lettered (a
// publish to a queue that does not exist, with MaxAttempts 1).
func deadOutbox(t *testing.T, ctx context.Context, mq *acemq.Conn, n int) *outbox.Outbox {
	t.Helper()
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
	lost := outbox.NewPublisher[order](o, mq, "", "nowhere")
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
		done <- outbox.NewRelay(o, mq, outbox.MaxAttempts(1), outbox.PollInterval(5*time.Millisecond), outbox.WithLogger(quiet)).Run(rctx)
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

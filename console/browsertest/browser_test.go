package browsertest_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/console"
	"github.com/chromedp/chromedp"
)

var quiet = slog.New(slog.DiscardHandler)

// chromium finds the browser, or skips the test (fails it with
// ACEMQ_REQUIRE_BROWSER=1).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("ACEMQ_REQUIRE_BROWSER") == "1" {
		t.Fatal("no chromium binary found and ACEMQ_REQUIRE_BROWSER=1 (apt-get install chromium)")
	}
	t.Skip("no chromium binary found (apt-get install chromium); ACEMQ_REQUIRE_BROWSER=1 makes this a failure")
	return ""
}

type orderPlaced struct {
	OrderID    string `json:"orderId"`
	TotalCents int64  `json:"totalCents"`
}

type step struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// TestOperatorFixesDeadLetters: in a headless Chromium, an operator opens
// the overview, groups 500 dead letters of 3 types, opens the one whose
// body holds a script (shown, not run), edits and replays it, and releases
// a blocked key with a re-run; then the broker's queues say it all
// happened: the edited message alone left .dlq and reached the work queue,
// and the blocked key's messages ran in order.
func TestOperatorFixesDeadLetters(t *testing.T) {
	exe := chromium(t)
	for _, b := range []struct {
		name string
		url  func(testing.TB) string
	}{{"memory", acemqtest.Memory}, {"rabbitmq", acemqtest.RabbitMQ}} {
		t.Run(b.name, func(t *testing.T) { operator(t, exe, b.url(t)) })
	}
}

func operator(t *testing.T, exe, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mq, err := acemq.Connect(ctx, url, acemq.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mq.Close() })

	// A work queue whose .dlq holds 500 dead letters of three types, the
	// first with a hostile body.
	q := acemqtest.QueueName(t, "orders")
	acemqtest.DeleteQueuesAfter(t, url, q)
	dlq := acemq.DeadLetterQueue(q)
	if err := mq.Declare(ctx, acemq.Queue{Name: q}, acemq.Queue{Name: dlq}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_ = mq.Transport().DeleteQueue(dctx, q)
		_ = mq.Transport().DeleteQueue(dctx, dlq)
	}()
	types := []string{"OrderPlaced", "OrderCancelled", "PaymentTaken"}
	msgs := make([]acemq.RawMessage, 500)
	for i := range msgs {
		typ := types[i%3]
		env := &acemq.Envelope{ID: fmt.Sprintf("m%03d", i), Type: typ, Version: 1, Attempt: 3, Error: typ + ": customer 42 does not exist"}
		body := fmt.Sprintf(`{"orderId":"o-%d","totalCents":%d}`, i, i)
		if i == 0 {
			env.ID, body = "hostile", `{"orderId":"<script>window.pwned=1</script>","totalCents":-1}`
		}
		msgs[i] = acemq.RawMessage{RoutingKey: dlq, Envelope: env, Body: []byte(body), ContentType: "application/json"}
	}
	for i, err := range mq.PublishRawAll(ctx, msgs) {
		if err != nil {
			t.Fatalf("dead letter %d: %v", i, err)
		}
	}

	// An ordered queue whose key order-7 is blocked, two messages held.
	k := newBlocked(t, ctx, mq, url)
	queues := []string{q}
	if k != nil {
		queues = append(queues, k.queue)
	}

	srv := httptest.NewServer(console.Handler(mq, console.Write(), console.Queues(queues...), console.Logger(quiet),
		console.CheckJSON[orderPlaced]("OrderPlaced")))
	defer srv.Close()

	// The browser.
	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1200, 800))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	shots := map[string]*[]byte{}
	shot := func(name, section string) chromedp.Action[chromedp.Void] {
		var buf []byte
		shots[name] = &buf
		return chromedp.Steps(chromedp.ScrollIntoView(chromedp.CSS(section)), into(chromedp.CaptureScreenshot(), &buf))
	}
	wait := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(20*time.Second))
	}
	var groups int
	var counts []string
	var bodyText, result, keysResult string
	var pwned bool
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	err = chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(css(`.family[data-queue="`+q+`"]`)),
		shot("overview", "#overview-section"),
		chromedp.Click(css(`button.open-dead[data-queue="`+dlq+`"]`)),
		chromedp.WaitVisible(css(`.group a.message-link[data-id="hostile"]`)),
		into(chromedp.Evaluate[int](`document.querySelectorAll('.group').length`), &groups),
		into(chromedp.Evaluate[[]string](`[...document.querySelectorAll('.group')].map(g => g.dataset.type + '=' + g.dataset.count)`), &counts),
		shot("groups", "#dead-section"),
		chromedp.Click(css(`a.message-link[data-id="hostile"]`)),
		wait(`document.getElementById('message-id').textContent === 'hostile'`),
		into(chromedp.TextContent(css(`#body`)), &bodyText),
		into(chromedp.Evaluate[bool](`window.pwned === 1`), &pwned),
		shot("message", "#message-section"),
		chromedp.SetValue(css(`#edit-body`), `{"orderId":"o-0","totalCents":1250}`),
		chromedp.Click(css(`#edit-replay`)),
		wait(`document.getElementById('message-result').className !== ''`),
		into(chromedp.TextContent(css(`#message-result`)), &result),
	)
	if err == nil && k != nil {
		err = chromedp.Do(bctx,
			chromedp.Click(css(`button.open-keys[data-queue="`+k.queue+`"]`)),
			chromedp.WaitVisible(css(`button.release-rerun[data-key="order-7"]`)),
			shot("keys", "#keys-section"),
			chromedp.Func(func(context.Context, *chromedp.Target) error {
				k.heal()
				return nil
			}),
			chromedp.Click(css(`button.release-rerun[data-key="order-7"]`)),
			wait(`document.getElementById('keys-result').className !== ''`),
			into(chromedp.TextContent(css(`#keys-result`)), &keysResult),
		)
	}
	if err != nil {
		t.Fatalf("in the browser: %v", err)
	}
	// The page closes; the server waits for its requests (a refresh of
	// the groups may be reading), each of which puts back what it held.
	bcancel()
	acancel()
	srv.Close()
	if groups != 3 {
		t.Errorf("%d groups shown, want 3", groups)
	}
	slices.Sort(counts)
	if want := []string{"OrderCancelled=167", "OrderPlaced=167", "PaymentTaken=166"}; !slices.Equal(counts, want) {
		t.Errorf("groups %v, want %v", counts, want)
	}
	if want := `"orderId": "<script>window.pwned=1</script>"`; !strings.Contains(bodyText, want) || pwned {
		t.Errorf("body shown as %q (pwned %v), want the script as text, not run", bodyText, pwned)
	}
	if !strings.Contains(result, "replayed hostile to "+q) {
		t.Errorf("edit and replay said %q", result)
	}
	if k != nil && !strings.Contains(keysResult, "released order-7 (rerun)") {
		t.Errorf("release said %q", keysResult)
	}

	// The broker's side: the edited message alone left .dlq, for q, with
	// its audit header; the blocked key's messages ran in order.
	if info, err := mq.Transport().Inspect(ctx, dlq); err != nil || info.Messages != 499 {
		t.Errorf("%s: %+v %v, want 499 left", dlq, info, err)
	}
	d, ok, err := mq.Transport().Get(ctx, q)
	if err != nil || !ok {
		t.Fatalf("%s: %v %v, want the edited message", q, ok, err)
	}
	env, err := acemq.EnvelopeOf(d.Message)
	_ = d.Ack()
	if err != nil || env.ID != "hostile" || string(d.Body) != `{"orderId":"o-0","totalCents":1250}` || env.Reserved()[console.HeaderEditedBy] == nil {
		t.Errorf("on %s: %+v %s %v", q, env, d.Body, err)
	}
	if k != nil {
		k.wantSeen(t, 1, 1, 2, 3)
	}
	if os.Getenv("ACEMQ_CONSOLE_SCREENSHOTS") == "1" {
		for name, buf := range shots {
			p := filepath.Join("..", "..", "docs", "images", "console-"+name+".png")
			if err := os.WriteFile(p, *buf, 0o644); err != nil {
				t.Error(err)
			}
		}
	}
}

// into runs a and keeps its value in dst.
func into[T any](a chromedp.Action[T], dst *T) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		v, err := a(ctx, t)
		*dst = v
		return chromedp.Void{}, err
	}
}

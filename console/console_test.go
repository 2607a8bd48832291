package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/console"
)

type groupsReply struct {
	Read    int  `json:"read"`
	Before  int  `json:"before"`
	After   int  `json:"after"`
	Changed bool `json:"changed"`
	Groups  []struct {
		Type, Reason string
		Count        int
		Messages     []struct{ ID string }
	} `json:"groups"`
}

type overviewReply struct {
	Families []struct {
		Queue   string
		Members []struct {
			Name   string
			Role   string
			Absent bool
			Ready  int
		}
	}
}

// TestOverviewCountsEachFamilyMember: the overview shows the named work
// queue, its .dlq with the count the broker gives, and .parked as absent.
func TestOverviewCountsEachFamilyMember(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			c := connect(t, url)
			q := family(t, c, url)
			fill(t, c, acemq.DeadLetterQueue(q), mixed(7))
			s := server(t, c, console.Queues(q))
			var o overviewReply
			getJSON(t, s, "/api/overview", &o)
			if len(o.Families) != 1 || o.Families[0].Queue != q {
				t.Fatalf("families %+v, want one for %s", o.Families, q)
			}
			got := map[string]string{}
			for _, m := range o.Families[0].Members {
				got[m.Role] = fmt.Sprintf("%s ready=%d absent=%v", m.Name, m.Ready, m.Absent)
			}
			want := map[string]string{
				"work":         q + " ready=0 absent=false",
				"dead letters": q + ".dlq ready=7 absent=false",
				"parked":       q + ".parked ready=0 absent=true",
			}
			for role, w := range want {
				if got[role] != w {
					t.Errorf("%s: %q, want %q", role, got[role], w)
				}
			}
		})
	}
}

// TestGroupsLeaveTheQueueAsItWas: reading a .dlq, classic or quorum,
// groups its messages by type and reason with counts, acks nothing and
// keeps the order.
func TestGroupsLeaveTheQueueAsItWas(t *testing.T) {
	t.Parallel()
	for _, b := range append(brokers, struct {
		name string
		url  func(testing.TB) string
	}{"rabbitmq-quorum", brokers[1].url}) {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			c := connect(t, url)
			q := familyOf(t, c, url, strings.HasSuffix(b.name, "quorum"))
			dlq := acemq.DeadLetterQueue(q)
			fill(t, c, dlq, mixed(30))
			s := server(t, c)
			var g groupsReply
			getJSON(t, s, "/api/deadletters?queue="+dlq, &g)
			if g.Read != 30 || g.Before != 30 || g.After != 30 || g.Changed {
				t.Errorf("read %d, before %d, after %d, changed %v; want 30, 30, 30, false", g.Read, g.Before, g.After, g.Changed)
			}
			if len(g.Groups) != 3 {
				t.Fatalf("%d groups, want 3: %+v", len(g.Groups), g.Groups)
			}
			for _, gr := range g.Groups {
				if gr.Count != 10 || gr.Reason != gr.Type+" failed: customer 42 does not exist" {
					t.Errorf("group %s: count %d reason %q", gr.Type, gr.Count, gr.Reason)
				}
			}
			if n := readyIs(t, c, dlq, 30); n != 30 {
				t.Fatalf("%s holds %d after the read, want 30", dlq, n)
			}
			// The order is kept: the head is still the first published.
			d, ok, err := c.Transport().Get(ctxT(t), dlq)
			if err != nil || !ok {
				t.Fatalf("Get: %v %v", ok, err)
			}
			defer func() { _ = d.Nack(true) }()
			if d.MessageID != "m00000" {
				t.Errorf("head is %s after the read, want m00000", d.MessageID)
			}
		})
	}
}

// TestMessageShowsItWhole: one message's envelope, headers, pretty body
// and trace ID; a body holding <script> comes back as data in JSON, and
// the page is served under a CSP that runs the console's own script only.
func TestMessageShowsItWhole(t *testing.T) {
	t.Parallel()
	url := brokers[0].url(t)
	c := connect(t, url)
	q := family(t, c, url)
	dlq := acemq.DeadLetterQueue(q)
	hostile := `{"note":"<script>window.pwned=1</script>"}`
	fill(t, c, dlq, []deadLetter{{id: "m1", typ: "OrderPlaced", reason: "bad note", body: hostile,
		headers: map[string]any{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}}})
	s := server(t, c)
	var m struct {
		ID, Type, Error, TraceID, Body string
		JSON                           bool
		Headers                        map[string]string
	}
	getJSON(t, s, "/api/message?queue="+dlq+"&id=m1", &m)
	if m.ID != "m1" || m.Type != "OrderPlaced" || m.Error != "bad note" || m.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || !m.JSON {
		t.Errorf("message %+v", m)
	}
	if m.Headers["tenant"] != "acme" {
		t.Errorf("headers %v, want tenant=acme", m.Headers)
	}
	if !strings.Contains(m.Body, "<script>window.pwned=1</script>") || !strings.Contains(m.Body, "\n  \"note\"") {
		t.Errorf("body %q, want the script as text, pretty-printed", m.Body)
	}
	res, err := s.Client().Get(s.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP %q, want script-src 'self'", csp)
	}
	if n := readyIs(t, c, dlq, 1); n != 1 {
		t.Errorf("%s holds %d after the read, want 1", dlq, n)
	}
	if code, _ := get(t, s, "/api/message?queue="+dlq+"&id=nope"); code != http.StatusNotFound {
		t.Errorf("a missing message: %d, want 404", code)
	}
	if code, _ := get(t, s, "/api/deadletters?queue="+q); code != http.StatusBadRequest {
		t.Errorf("a work queue as a dead-letter queue: %d, want 400", code)
	}
}

// TestReplayAGroup moves one group back to the work queue and leaves the
// other groups in .dlq.
func TestReplayAGroup(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			c := connect(t, url)
			q := family(t, c, url)
			dlq := acemq.DeadLetterQueue(q)
			fill(t, c, dlq, mixed(300))
			s := server(t, c, console.Write())
			csrf := csrfOf(t, s)
			code, body := post(t, s, "/api/replay", csrf, map[string]any{"queue": dlq, "group": true,
				"type": "OrderCancelled", "reason": "OrderCancelled failed: customer 42 does not exist"})
			if code != http.StatusOK {
				t.Fatalf("replay: %d %s", code, body)
			}
			lines := strings.Split(strings.TrimSpace(body), "\n")
			var end struct {
				Done          bool
				Moved, Failed int
				Error         string
			}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &end); err != nil {
				t.Fatal(err)
			}
			if !end.Done || end.Moved != 100 || end.Failed != 0 || end.Error != "" {
				t.Errorf("replay ended %+v, want 100 moved", end)
			}
			if len(lines) < 2 {
				t.Errorf("no progress lines before the end: %q", body)
			}
			if n := readyIs(t, c, q, 100); n != 100 {
				t.Errorf("%s holds %d, want 100", q, n)
			}
			if n := readyIs(t, c, dlq, 200); n != 200 {
				t.Errorf("%s holds %d, want 200", dlq, n)
			}
		})
	}
}

type orderPlaced struct {
	OrderID    string `json:"orderId"`
	TotalCents int64  `json:"totalCents"`
}

// TestEditAndReplay: a body that does not decode as the type is refused
// and the original stays; an edited one reaches the work queue with the
// audit headers, and the original leaves .dlq.
func TestEditAndReplay(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			c := connect(t, url)
			q := family(t, c, url)
			dlq := acemq.DeadLetterQueue(q)
			fill(t, c, dlq, []deadLetter{{id: "a", typ: "OrderPlaced", reason: "r"}, {id: "b", typ: "OrderPlaced", reason: "r"}, {id: "c", typ: "Other", reason: "r"}})
			s := server(t, c, console.Write(), console.CheckJSON[orderPlaced]("OrderPlaced"), console.Who(func(*http.Request) string { return "alice" }))
			csrf := csrfOf(t, s)
			if code, body := post(t, s, "/api/edit", csrf, map[string]string{"queue": dlq, "id": "b", "body": `{"orderId":"o-1","total":5}`}); code != http.StatusBadRequest || !strings.Contains(body, "does not decode as OrderPlaced") {
				t.Errorf("a body that is not an OrderPlaced: %d %s", code, body)
			}
			if code, body := post(t, s, "/api/edit", csrf, map[string]string{"queue": dlq, "id": "c", "body": `{"x":`}); code != http.StatusBadRequest || !strings.Contains(body, "not valid JSON") {
				t.Errorf("invalid JSON of an unregistered type: %d %s", code, body)
			}
			if n := readyIs(t, c, dlq, 3); n != 3 {
				t.Fatalf("%s holds %d after refused edits, want 3", dlq, n)
			}
			code, body := post(t, s, "/api/edit", csrf, map[string]string{"queue": dlq, "id": "b", "body": `{"orderId":"o-1","totalCents":999}`})
			if code != http.StatusOK || !strings.Contains(body, `"changed":["totalCents"]`) {
				t.Fatalf("edit: %d %s", code, body)
			}
			d, ok, err := c.Transport().Get(ctxT(t), q)
			if err != nil || !ok {
				t.Fatalf("Get %s: %v %v", q, ok, err)
			}
			defer func() { _ = d.Ack() }()
			env, err := acemq.EnvelopeOf(d.Message)
			if err != nil {
				t.Fatal(err)
			}
			if env.ID != "b" || string(d.Body) != `{"orderId":"o-1","totalCents":999}` || env.Attempt != 1 || env.Error != "" {
				t.Errorf("replayed %+v body %s", env, d.Body)
			}
			if by := env.Reserved()[console.HeaderEditedBy]; by != "alice" {
				t.Errorf("%s = %v, want alice", console.HeaderEditedBy, by)
			}
			if _, ok := env.Reserved()[console.HeaderEditedAt]; !ok {
				t.Errorf("no %s header", console.HeaderEditedAt)
			}
			var g groupsReply
			getJSON(t, s, "/api/deadletters?queue="+dlq, &g)
			if g.Read != 2 || len(g.Groups) != 2 {
				t.Errorf("%s after the edit: %+v, want a and c", dlq, g)
			}
		})
	}
}

// TestDiscardNeedsAReason: a discard without a reason is refused; with
// one the message leaves .dlq.
func TestDiscardNeedsAReason(t *testing.T) {
	t.Parallel()
	url := brokers[0].url(t)
	c := connect(t, url)
	q := family(t, c, url)
	dlq := acemq.DeadLetterQueue(q)
	fill(t, c, dlq, mixed(3))
	s := server(t, c, console.Write())
	csrf := csrfOf(t, s)
	if code, _ := post(t, s, "/api/discard", csrf, map[string]string{"queue": dlq, "id": "m00001"}); code != http.StatusBadRequest {
		t.Errorf("discard without a reason: %d, want 400", code)
	}
	if code, body := post(t, s, "/api/discard", csrf, map[string]string{"queue": dlq, "id": "m00001", "reason": "test order"}); code != http.StatusOK {
		t.Fatalf("discard: %d %s", code, body)
	}
	var g groupsReply
	getJSON(t, s, "/api/deadletters?queue="+dlq, &g)
	if g.Read != 2 {
		t.Errorf("%s holds %d after a discard, want 2", dlq, g.Read)
	}
}

// TestSafeByDefault: each way a request is refused.
func TestSafeByDefault(t *testing.T) {
	t.Parallel()
	url := brokers[0].url(t)
	c := connect(t, url)
	q := family(t, c, url)
	dlq := acemq.DeadLetterQueue(q)
	fill(t, c, dlq, mixed(3))
	replayAll := map[string]any{"queue": dlq, "all": true}

	t.Run("read-only", func(t *testing.T) {
		s := server(t, c)
		if code, body := post(t, s, "/api/replay", csrfOf(t, s), replayAll); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("a write on a read-only console: %d %s", code, body)
		}
	})
	t.Run("no CSRF token", func(t *testing.T) {
		s := server(t, c, console.Write())
		if code, body := post(t, s, "/api/replay", "", replayAll); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("a write without the token: %d %s", code, body)
		}
		if code, _ := post(t, s, "/api/replay", "0123456789abcdef0123456789abcdef", replayAll); code != http.StatusForbidden {
			t.Errorf("a write with another token: %d", code)
		}
	})
	t.Run("cross-site POST", func(t *testing.T) {
		s := server(t, c, console.Write())
		code, _ := post(t, s, "/api/replay", csrfOf(t, s), replayAll, "Sec-Fetch-Site", "cross-site")
		if code != http.StatusForbidden {
			t.Errorf("a cross-site write: %d, want 403", code)
		}
		code, _ = post(t, s, "/api/replay", csrfOf(t, s), replayAll, "Origin", "https://evil.example")
		if code != http.StatusForbidden {
			t.Errorf("a write from another origin: %d, want 403", code)
		}
	})
	t.Run("no token", func(t *testing.T) {
		s := server(t, c, console.Token("s3cret"))
		if code, _ := get(t, s, "/api/overview"); code != http.StatusUnauthorized {
			t.Errorf("no token: %d, want 401", code)
		}
		if code, _ := get(t, s, "/api/overview?token=wrong"); code != http.StatusUnauthorized {
			t.Errorf("a wrong token: %d, want 401", code)
		}
		res, err := s.Client().Get(s.URL + "/?token=s3cret")
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK || len(res.Cookies()) != 1 || !res.Cookies()[0].HttpOnly {
			t.Errorf("the link with the token: %d, cookies %v", res.StatusCode, res.Cookies())
		}
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/api/overview", nil)
		req.Header.Set("Authorization", "Bearer s3cret")
		res, err = s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("a bearer token: %d", res.StatusCode)
		}
	})
	t.Run("not loopback", func(t *testing.T) {
		h := console.Handler(c, console.Logger(quiet))
		req := httptest.NewRequest(http.MethodGet, "/api/overview", nil)
		req.RemoteAddr = "203.0.113.7:40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusForbidden {
			t.Errorf("a remote client without Auth: %d, want 403", w.Code)
		}
	})
	if n := readyIs(t, c, dlq, 3); n != 3 {
		t.Errorf("%s holds %d after refused writes, want 3", dlq, n)
	}
}

// TestReleaseRefusesWhatItCannotDo: a release needs Write, a mode of rerun
// or skip, and an ordered queue; the keys of a plain queue are an error.
func TestReleaseRefusesWhatItCannotDo(t *testing.T) {
	t.Parallel()
	url := brokers[0].url(t)
	c := connect(t, url)
	q := family(t, c, url)
	ro := server(t, c)
	if code, _ := post(t, ro, "/api/release", csrfOf(t, ro), map[string]string{"queue": q, "key": "k", "mode": "rerun"}); code != http.StatusForbidden {
		t.Errorf("a release on a read-only console: %d, want 403", code)
	}
	rw := server(t, c, console.Write())
	csrf := csrfOf(t, rw)
	if code, body := post(t, rw, "/api/release", csrf, map[string]string{"queue": q, "key": "k", "mode": "later"}); code != http.StatusBadRequest || !strings.Contains(body, "rerun or skip") {
		t.Errorf("a release with mode later: %d %s", code, body)
	}
	if code, _ := post(t, rw, "/api/release", csrf, map[string]string{"queue": q, "key": "k", "mode": "skip"}); code != http.StatusBadRequest {
		t.Errorf("a release on a plain queue: %d, want 400", code)
	}
	if code, _ := get(t, rw, "/api/keys?queue="+q); code != http.StatusBadRequest {
		t.Errorf("the keys of a plain queue: %d, want 400", code)
	}
}

package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/console"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// brokers are the brokers the tests run on: memory always, RabbitMQ when
// acemqtest finds one (skipped otherwise).
var brokers = []struct {
	name string
	url  func(testing.TB) string
}{
	{"memory", acemqtest.Memory},
	{"rabbitmq", acemqtest.RabbitMQ},
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// connect opens a Conn to url, closed when the test ends.
func connect(t *testing.T, url string) *acemq.Conn {
	t.Helper()
	c, err := acemq.Connect(ctxT(t), url, acemq.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// family declares a work queue and its .dlq, deleted when the test ends.
func family(t *testing.T, c *acemq.Conn, url string) string {
	t.Helper()
	return familyOf(t, c, url, false)
}

// familyOf is family, with quorum queues when quorum is set.
func familyOf(t *testing.T, c *acemq.Conn, url string, quorum bool) string {
	t.Helper()
	q := acemqtest.QueueName(t, "orders")
	if err := c.Declare(ctxT(t), acemq.Queue{Name: q, Quorum: quorum}, acemq.Queue{Name: acemq.DeadLetterQueue(q), Quorum: quorum}); err != nil {
		t.Fatal(err)
	}
	acemqtest.DeleteQueuesAfter(t, url, q)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Transport().DeleteQueue(ctx, q)
		_ = c.Transport().DeleteQueue(ctx, acemq.DeadLetterQueue(q))
	})
	return q
}

// deadLetter is one message to put in a .dlq.
type deadLetter struct {
	id, typ, reason string
	body            string
	headers         map[string]any
}

// fill publishes msgs to queue, as the engine dead-letters them.
func fill(t *testing.T, c *acemq.Conn, queue string, msgs []deadLetter) {
	t.Helper()
	raw := make([]acemq.RawMessage, len(msgs))
	for i, m := range msgs {
		body := m.body
		if body == "" {
			body = fmt.Sprintf(`{"orderId":"o-%d","totalCents":%d}`, i, 100+i)
		}
		env := &acemq.Envelope{ID: m.id, Type: m.typ, Version: 1, Attempt: 3, Error: m.reason,
			FirstSeen: time.Now().UTC().Truncate(time.Second), Headers: m.headers}
		raw[i] = acemq.RawMessage{RoutingKey: queue, Envelope: env, Body: []byte(body), ContentType: "application/json"}
	}
	for i, err := range c.PublishRawAll(ctxT(t), raw) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

// mixed is n dead letters of three types, each type with its own reason.
func mixed(n int) []deadLetter {
	types := []string{"OrderPlaced", "OrderCancelled", "PaymentTaken"}
	out := make([]deadLetter, n)
	for i := range out {
		typ := types[i%3]
		out[i] = deadLetter{id: fmt.Sprintf("m%05d", i), typ: typ, reason: typ + " failed: customer 42 does not exist"}
	}
	return out
}

// ready is queue's ready count.
func ready(t *testing.T, c *acemq.Conn, queue string) int {
	t.Helper()
	info, err := c.Transport().Inspect(ctxT(t), queue)
	if err != nil {
		t.Fatal(err)
	}
	return info.Messages
}

// readyIs is queue's ready count once it is want, or after 5 s what it
// is then: messages put back with a nack on one channel reach the count
// another channel reads a moment later.
func readyIs(t *testing.T, c *acemq.Conn, queue string, want int) int {
	t.Helper()
	n := ready(t, c, queue)
	for deadline := time.Now().Add(5 * time.Second); n != want && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		n = ready(t, c, queue)
	}
	return n
}

// server serves the console of c, closed when the test ends.
func server(t *testing.T, c *acemq.Conn, opts ...console.Option) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(console.Handler(c, append([]console.Option{console.Logger(quiet)}, opts...)...))
	t.Cleanup(s.Close)
	return s
}

var csrfMeta = regexp.MustCompile(`name="acemq-csrf" content="([0-9a-f]+)"`)

// csrfOf reads the CSRF token from the console's page.
func csrfOf(t *testing.T, s *httptest.Server) string {
	t.Helper()
	_, page := get(t, s, "/")
	m := csrfMeta.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

// get fetches path and returns the status and body.
func get(t *testing.T, s *httptest.Server, path string) (int, string) {
	t.Helper()
	res, err := s.Client().Get(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// getJSON fetches path, wants 200 and decodes the body into v.
func getJSON(t *testing.T, s *httptest.Server, path string, v any) {
	t.Helper()
	code, body := get(t, s, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

// post sends v as JSON to path with the CSRF token csrf ("" for none) and
// returns the status and body.
func post(t *testing.T, s *httptest.Server, path, csrf string, v any, header ...string) (int, string) {
	t.Helper()
	return postCtx(t, ctxT(t), s, path, csrf, v, header...)
}

// postCtx is post within ctx.
func postCtx(t *testing.T, ctx context.Context, s *httptest.Server, path, csrf string, v any, header ...string) (int, string) {
	t.Helper()
	b, _ := json.Marshal(v)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if csrf != "" {
		req.Header.Set("X-Acemq-Csrf", csrf)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(out)
}

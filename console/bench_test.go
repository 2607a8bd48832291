package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/console"
	"github.com/acemq/acemq/transport"
)

// tenThousand is the size of the targets: 10,000 dead letters grouped in
// at most 2 s, and a group of 10,000 replayed with none lost or doubled.
const tenThousand = 10000

// fillMany fills queue with n dead letters of three types, in batches.
func fillMany(tb testing.TB, c *acemq.Conn, queue string, all []deadLetter) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := len(all)
	for start := 0; start < n; start += 1000 {
		batch := all[start:min(start+1000, n)]
		raw := make([]acemq.RawMessage, len(batch))
		for i, m := range batch {
			env := &acemq.Envelope{ID: m.id, Type: m.typ, Version: 1, Attempt: 3, Error: m.reason}
			raw[i] = acemq.RawMessage{RoutingKey: queue, Envelope: env, Body: []byte(`{"orderId":"o-1","totalCents":100}`), ContentType: "application/json"}
		}
		for _, err := range c.PublishRawAll(ctx, raw) {
			if err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// BenchmarkGroupTenThousand reads and groups a .dlq of 10,000 through the
// console's API, beside the plain path: the same consumer and Nacks with
// no grouping, no JSON and no HTTP. The ratio of the two is the console's
// cost; the console's ns/op is the target's 2 s bound.
func BenchmarkGroupTenThousand(b *testing.B) {
	for _, br := range brokers {
		b.Run(br.name, func(b *testing.B) {
			url := br.url(b)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			c, err := acemq.Connect(ctx, url, acemq.WithLogger(quiet))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			dlq := acemq.DeadLetterQueue(acemqtest.QueueName(b, "bench"))
			if err := c.Declare(ctx, acemq.Queue{Name: dlq}); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = c.Transport().DeleteQueue(context.Background(), dlq) }()
			fillMany(b, c, dlq, mixed(tenThousand))
			h := console.Handler(c, console.Logger(quiet))
			b.Run("console", func(b *testing.B) {
				for b.Loop() {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/api/deadletters?queue="+dlq, nil)
					req.RemoteAddr = "127.0.0.1:1"
					w := &recorder{header: http.Header{}}
					h.ServeHTTP(w, req)
					var out struct{ Read int }
					if err := json.Unmarshal([]byte(w.body.String()), &out); err != nil || out.Read != tenThousand {
						b.Fatalf("read %d: %v %s", out.Read, err, w.body.String()[:min(200, w.body.Len())])
					}
				}
			})
			b.Run("plain-consume-nack", func(b *testing.B) {
				for b.Loop() {
					cctx, stop := context.WithCancel(ctx)
					got := make(chan transport.Delivery, tenThousand)
					ended := make(chan error, 1)
					go func() {
						ended <- c.Transport().Consume(cctx, dlq, tenThousand, func(d transport.Delivery) { got <- d })
					}()
					held := make([]transport.Delivery, 0, tenThousand)
					for len(held) < tenThousand {
						held = append(held, <-got)
					}
					stop()
					for _, d := range held {
						_ = d.Nack(true)
					}
					if err := <-ended; err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// recorder is a minimal http.ResponseWriter for the benchmark.
type recorder struct {
	header http.Header
	body   strings.Builder
	code   int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// TestReplayTenThousand: a group of 10,000 replayed through the console
// reaches the work queue whole: none lost, none twice, and .dlq empty. On
// RabbitMQ it runs without -short only.
func TestReplayTenThousand(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			if testing.Short() && b.name != "memory" {
				t.Skip("10,000 messages through RabbitMQ: without -short only")
			}
			url := b.url(t)
			c := connect(t, url)
			q := family(t, c, url)
			dlq := acemq.DeadLetterQueue(q)
			// The group, then 1,000 of another type, which stay.
			msgs := mixed(tenThousand + 1000)
			for i := range msgs {
				typ := "OrderPlaced"
				if i >= tenThousand {
					typ = "PaymentTaken"
				}
				msgs[i].typ, msgs[i].reason = typ, typ+" failed: customer 42 does not exist"
			}
			fillMany(t, c, dlq, msgs)
			s := server(t, c, console.Write())
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			code, body := postCtx(t, ctx, s, "/api/replay", csrfOf(t, s), map[string]any{"queue": dlq, "group": true,
				"type": "OrderPlaced", "reason": "OrderPlaced failed: customer 42 does not exist"})
			if code != http.StatusOK || !strings.Contains(body, `"done":true`) || !strings.Contains(body, `"moved":10000`) {
				t.Fatalf("replay: %d %s", code, body[max(0, len(body)-300):])
			}
			seen := map[string]int{}
			for {
				d, ok, err := c.Transport().Get(ctxT(t), q)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				seen[d.MessageID]++
				if err := d.Ack(); err != nil {
					t.Fatal(err)
				}
			}
			doubled := 0
			for _, n := range seen {
				if n > 1 {
					doubled++
				}
			}
			if len(seen) != tenThousand || doubled != 0 {
				t.Errorf("%d distinct messages on %s, %d twice; want 10000 and 0", len(seen), q, doubled)
			}
			if n := readyIs(t, c, dlq, 1000); n != 1000 {
				t.Errorf("%s holds %d, want the other group's 1000", dlq, n)
			}
		})
	}
}

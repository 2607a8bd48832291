package hardtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

// hostileMaxBody is the MaxBodySize of the consumer under attack.
const hostileMaxBody = 256 << 10

// maxReason bounds every reason the engine writes: a hostile input must not
// be able to make a huge one.
const maxReason = 4096

// hostileCase is one malformed message a foreign producer sends.
type hostileCase struct {
	name    string
	p       amqp.Publishing
	outcome acemq.Outcome // what the consumer settles it as
	reason  string        // the reason starts with this
	check   func(t *testing.T, m *acemq.Message[Order])
}

// nested returns a table nested n levels deep.
func nested(n int) any {
	var v any = "leaf"
	for range n {
		v = amqp.Table{"n": v}
	}
	return v
}

// manyHeaders returns a table of n entries, 8 bytes each on the wire.
func manyHeaders(n int) amqp.Table {
	h := make(amqp.Table, n)
	for i := range n {
		h[fmt.Sprintf("h%04d", i)] = true
	}
	return h
}

func hostileCases() []hostileCase {
	body := []byte(`{"id":"h","cents":1}`)
	json := "application/json"
	withHeaders := func(h amqp.Table) amqp.Publishing {
		return amqp.Publishing{ContentType: json, Body: body, Headers: h}
	}
	return []hostileCase{
		{name: "non-JSON body", p: amqp.Publishing{ContentType: json, Body: []byte("<order id='1'/>")},
			outcome: acemq.OutcomeParked, reason: "the body does not decode as application/json into Order: invalid character '<'"},
		{name: "wrong content type", p: amqp.Publishing{ContentType: "application/xml", Body: body},
			outcome: acemq.OutcomeParked, reason: `no codec for content type "application/xml"`},
		{name: "missing content type (decoded with the Conn's codec)", p: amqp.Publishing{Body: body},
			outcome: acemq.OutcomeAcked, check: func(t *testing.T, m *acemq.Message[Order]) {
				assert.Equal(t, "h", m.Payload.ID)
			}},
		{name: "empty body", p: amqp.Publishing{ContentType: json},
			outcome: acemq.OutcomeParked, reason: "the body does not decode as application/json into Order: unexpected end of JSON input"},
		{name: "body over MaxBodySize", p: amqp.Publishing{ContentType: json, Body: make([]byte, hostileMaxBody+1)},
			outcome: acemq.OutcomeParked, reason: fmt.Sprintf("the body is %d bytes, over the limit of %d", hostileMaxBody+1, hostileMaxBody)},
		{name: "JSON number of 200 KB (a decode error quoting it)", p: amqp.Publishing{ContentType: json, Body: []byte(`{"cents":` + strings.Repeat("9", 200<<10) + `}`)},
			outcome: acemq.OutcomeParked, reason: "the body does not decode as application/json into Order: json: cannot unmarshal number 999"},
		{name: `x-acemq-attempt "abc"`, p: withHeaders(amqp.Table{"x-acemq-attempt": "abc"}),
			outcome: acemq.OutcomeParked, reason: `the envelope is unreadable: header x-acemq-attempt is a string ("abc"), want an integer`},
		{name: "x-acemq-attempt -1", p: withHeaders(amqp.Table{"x-acemq-attempt": int32(-1)}),
			outcome: acemq.OutcomeParked, reason: "the envelope is unreadable: header x-acemq-attempt is -1, want 1 to 1000000"},
		{name: "x-acemq-attempt 2^62", p: withHeaders(amqp.Table{"x-acemq-attempt": int64(1) << 62}),
			outcome: acemq.OutcomeParked, reason: "the envelope is unreadable: header x-acemq-attempt is 4611686018427387904, want 1 to 1000000"},
		{name: "x-acemq-first-seen unparseable", p: withHeaders(amqp.Table{"x-acemq-first-seen": "last tuesday"}),
			outcome: acemq.OutcomeParked, reason: `the envelope is unreadable: header x-acemq-first-seen is "last tuesday", want an RFC 3339 time`},
		{name: "x-acemq-id a table", p: withHeaders(amqp.Table{"x-acemq-id": amqp.Table{"a": "b"}}),
			outcome: acemq.OutcomeParked, reason: "the envelope is unreadable: header x-acemq-id is a map[string]interface {}, want a string"},
		{name: "invalid UTF-8 in a reserved header", p: withHeaders(amqp.Table{"x-acemq-origin": "\xff\xfe"}),
			outcome: acemq.OutcomeParked, reason: "the envelope is unreadable: header x-acemq-origin is not valid UTF-8"},
		{name: "8,192 headers, ~64 KiB (the most amqp091-go reads)", p: withHeaders(manyHeaders(8192)),
			outcome: acemq.OutcomeParked, reason: "the envelope is unreadable: the message has 8192 headers, more than the 8176 acemq accepts"},
		{name: "header nested 32 levels (the deepest amqp091-go reads)", p: withHeaders(amqp.Table{"x-deep": nested(32)}),
			outcome: acemq.OutcomeAcked, check: func(t *testing.T, m *acemq.Message[Order]) {
				v := m.Envelope.Headers["x-deep"]
				for range 32 {
					tbl, ok := v.(map[string]any)
					require.True(t, ok, "a nested table arrives as map[string]any, got %T", v)
					v = tbl["n"]
				}
				assert.Equal(t, "leaf", v)
			}},
		{name: "invalid UTF-8 in an application header", p: withHeaders(amqp.Table{"x-tenant": "\xff\xfe"}),
			outcome: acemq.OutcomeAcked, check: func(t *testing.T, m *acemq.Message[Order]) {
				assert.Equal(t, "\xff\xfe", m.Envelope.Headers["x-tenant"], "application headers are the application's, byte for byte")
			}},
		{name: "missing message-id", p: amqp.Publishing{ContentType: json, Body: body},
			outcome: acemq.OutcomeAcked, check: func(t *testing.T, m *acemq.Message[Order]) {
				id, err := uuid.Parse(m.Envelope.ID)
				require.NoError(t, err, "the engine gives it an ID")
				assert.Equal(t, uuid.Version(7), id.Version())
			}},
	}
}

// TestHostileInput sends each malformed message from a raw amqp091-go
// producer to a running acemq consumer and checks it is parked with a
// reason naming the problem (or, where the spec says the input is the
// application's business, handled), that a good message is handled after
// each, and that goroutines and heap are back at their baseline after.
func TestHostileInput(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	before := measure()

	got, opt := newSettlements(64)
	c := connect(t, url, opt)
	q := queue(t, url, "hostile")
	handled := make(chan *acemq.Message[Order], 64)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Order]) acemq.Ack {
		handled <- m
		return acemq.Done()
	}, acemq.MaxBodySize(hostileMaxBody))
	require.NoError(t, err)
	stop := start(t, cons)
	producer := dialRaw(t, url)

	good := func(t *testing.T) {
		t.Helper()
		id := uuid.NewString()
		require.NoError(t, producer.publish(q, amqp.Publishing{ContentType: "application/json", MessageId: id, Body: []byte(`{"id":"good"}`)}))
		s := got.next(t)
		assert.Equal(t, acemq.OutcomeAcked, s.Outcome, "the consumer still handles good messages")
		assert.Equal(t, id, s.Envelope.ID)
		<-handled
	}
	good(t) // warm up: the baseline is taken with the consumer running
	warm := measure()

	var table strings.Builder
	fmt.Fprintf(&table, "\n%-55s | %-7s | %s\n", "input", "outcome", "reason")
	for _, tc := range hostileCases() {
		t.Run(tc.name, func(t *testing.T) {
			id := ""
			if tc.name != "missing message-id" {
				id = uuid.NewString()
				tc.p.MessageId = id
			}
			require.NoError(t, producer.publish(q, tc.p))
			s := got.next(t)
			reason := s.Reason
			if len(reason) > 120 {
				reason = reason[:120] + "..."
			}
			fmt.Fprintf(&table, "%-55s | %-7s | %s\n", tc.name, s.Outcome, reason)

			assert.Equal(t, tc.outcome, s.Outcome)
			assert.True(t, strings.HasPrefix(s.Reason, tc.reason), "reason %q\nwant it to start with %q", s.Reason, tc.reason)
			assert.LessOrEqual(t, len(s.Reason), maxReason, "the reason is bounded")
			if id != "" {
				assert.Equal(t, id, s.Envelope.ID)
			}
			switch tc.outcome {
			case acemq.OutcomeAcked:
				m := <-handled
				if tc.check != nil {
					tc.check(t, m)
				}
			case acemq.OutcomeParked, acemq.OutcomeDeadLettered:
				where := acemq.ParkingQueue(q)
				if tc.outcome != acemq.OutcomeParked {
					where = acemq.DeadLetterQueue(q)
				}
				d := producer.get(where)
				assert.Equal(t, s.Reason, d.Headers["x-acemq-error"], "the moved message carries the reason")
				assert.Equal(t, string(tc.p.Body), string(d.Body), "the body is kept as it came")
				assert.Equal(t, tc.p.ContentType, d.ContentType)
				if id != "" {
					assert.Equal(t, id, d.MessageId)
				}
				if len(tc.p.Headers) <= 8 {
					for k, v := range tc.p.Headers {
						assert.Equal(t, v, d.Headers[k], "the damaged header %s is kept as evidence", k)
					}
				}
			}
			good(t)
		})
	}
	t.Log(table.String())

	// Still running, back at its own baseline: nothing piled up.
	settleTo(t, warm, 2, 8<<20)
	require.Zero(t, producer.count(q), "nothing left behind on %s", q)
	require.Zero(t, producer.count(acemq.ParkingQueue(q)))
	require.NoError(t, c.Health(ctxT(t)))

	stop()
	require.NoError(t, c.Close())
	require.NoError(t, producer.conn.Close())
	settleTo(t, before, 2, 8<<20)
}

// TestHeaderTableTooBigToRead covers what amqp091-go refuses to read: a
// header table nested deeper than 32 levels or holding more than 8,192
// entries (tables and arrays alike). The broker accepts such a message from
// any producer; unguarded, reading it would fail the whole consuming
// connection again at each redelivery. The transport's frame guard replaces
// the table before amqp091 reads it, so the message is parked with the
// reason on classic and quorum queues alike, and the consumer goes on.
func TestHeaderTableTooBigToRead(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	for _, tc := range []struct {
		name    string
		headers amqp.Table
		reason  string
	}{
		{"nested 100 levels", amqp.Table{"x-deep": nested(100)}, "nested deeper than 32 levels"},
		{"10,000 entries", manyHeaders(10_000), "a table of more than 8192 entries"},
		{"an array of 10,000 elements", amqp.Table{"x-list": make([]any, 10_000)}, "an array of more than 8192 elements"},
	} {
		for _, quorum := range []bool{false, true} {
			name := tc.name + "/classic"
			var opts []acemq.ConsumerOption
			if quorum {
				name = tc.name + "/quorum"
				opts = append(opts, acemq.Quorum())
			}
			t.Run(name, func(t *testing.T) {
				got, opt := newSettlements(16)
				c := connect(t, url, opt)
				q := queue(t, url, "toobig")
				cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[Order]) acemq.Ack { return acemq.Done() }, opts...)
				require.NoError(t, err)
				start(t, cons)
				producer := dialRaw(t, url)
				require.NoError(t, producer.publish(q, amqp.Publishing{ContentType: "application/json", MessageId: "hostile", Body: []byte(`{}`), Headers: tc.headers}))
				s := got.next(t)
				assert.Equal(t, acemq.OutcomeParked, s.Outcome)
				assert.Contains(t, s.Reason, "the headers table cannot be read: "+tc.reason)
				assert.Equal(t, "hostile", s.Envelope.ID, "the envelope still comes from the AMQP properties")
				waitFor(t, "the parked copy", func() bool { return producer.count(acemq.ParkingQueue(q)) == 1 })
				id := uuid.NewString()
				require.NoError(t, producer.publish(q, amqp.Publishing{ContentType: "application/json", MessageId: id, Body: []byte(`{}`)}))
				next := got.next(t)
				assert.Equal(t, id, next.Envelope.ID)
				assert.Equal(t, acemq.OutcomeAcked, next.Outcome, "the consumer goes on")
				require.NoError(t, c.Health(ctxT(t)))
			})
		}
	}
}

// waitFor polls cond until it holds, failing after the suite's wait.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMostHeadersSurviveTheLadder retries a message with as many headers as
// acemq accepts through a retry tier: the reserved headers the engine adds
// and the x-death headers the broker adds must not push it past what
// amqp091-go reads, or the engine itself would make a message no consumer
// can read.
func TestMostHeadersSurviveTheLadder(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	tier := 5 * time.Millisecond
	got, opt := newSettlements(16)
	c := connect(t, url, opt)
	q := queue(t, url, "ladder", tier)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Order]) acemq.Ack {
		if m.Envelope.Attempt < 3 {
			return acemq.Retry(errors.New("again"))
		}
		return acemq.Done()
	}, acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 5, Delays: []time.Duration{tier}}))
	require.NoError(t, err)
	start(t, cons)
	producer := dialRaw(t, url)
	require.NoError(t, producer.publish(q, amqp.Publishing{ContentType: "application/json", Body: []byte(`{}`), Headers: manyHeaders(8128)}))
	for _, want := range []acemq.Outcome{acemq.OutcomeRetried, acemq.OutcomeRetried, acemq.OutcomeAcked} {
		s := got.next(t)
		require.Equal(t, want, s.Outcome, "reason %q", s.Reason)
		assert.GreaterOrEqual(t, len(s.Envelope.Headers), 8128, "the application headers arrive (with the broker's x-death ones)")
	}
}

// TestHugeHeaderTableNeverArrives sends a header table of about 1 MiB: more
// than the broker's frame_max (128 KiB by default), so the broker refuses
// it and no consumer ever sees it.
func TestHugeHeaderTableNeverArrives(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	c := connect(t, url)
	q := queue(t, url, "huge")
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[Order]) acemq.Ack { return acemq.Done() })
	require.NoError(t, err)
	start(t, cons)
	h := amqp.Table{}
	for i := range 100 {
		h[fmt.Sprintf("x-big-%03d", i)] = strings.Repeat("x", 10<<10)
	}
	producer := dialRaw(t, url)
	require.Error(t, producer.publish(q, amqp.Publishing{ContentType: "application/json", Body: []byte(`{}`), Headers: h}),
		"the broker refuses a header frame over frame_max")
	require.NoError(t, c.Health(ctxT(t)))
}

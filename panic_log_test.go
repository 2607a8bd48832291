package acemq_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
)

// errorLog keeps the Error records a Conn logs, with their attributes as
// text.
type errorLog struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (l *errorLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelError }
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l *errorLog) WithGroup(string) slog.Handler                 { return l }

func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	rec := map[string]string{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool {
		rec[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, rec)
	l.mu.Unlock()
	return nil
}

// with returns the records whose message is msg.
func (l *errorLog) with(msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.recs {
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

func explode(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
	panic("the pool is gone")
}

// A handler's panic is logged once, at Error, with its stack and the
// message's ID, whichever kind of consumer ran it (SPEC §6: the panic
// rejects the message; #32 asks for the stack).
func TestHandlerPanicLoggedWithStack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []acemq.ConsumerOption
	}{
		{name: "plain"},
		{name: "ordered", opts: []acemq.ConsumerOption{acemq.Ordered(acemq.OrderPolicy{Partitions: 2})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logs := &errorLog{}
			got, opt := newSettlements()
			c := connect(t, opt, acemq.WithLogger(slog.New(logs)))
			q := acemqtestQueue(t)
			cons, err := acemq.NewConsumer(c, q, explode, tc.opts...)
			require.NoError(t, err)
			run(t, cons)
			exchange, key := "", q
			if tc.name == "ordered" {
				exchange, key = q, ""
			}
			require.NoError(t, acemq.NewPublisher[OrderPlaced](c, exchange, key).Send(ctxT(t), OrderPlaced{OrderID: "A-1"}, acemq.Key("A-1")))
			s := got.next(t)
			assert.Equal(t, acemq.OutcomeRejected, s.Outcome)
			recs := logs.with("acemq: a handler panicked")
			require.Len(t, recs, 1, "logged once")
			assert.Equal(t, s.Envelope.ID, recs[0]["id"])
			assert.Equal(t, q, recs[0]["queue"])
			assert.Equal(t, "the pool is gone", recs[0]["panic"])
			assert.Contains(t, recs[0]["stack"], "panic_log_test.go", "the stack names the panicking handler")
		})
	}
}

// A batch handler's panic is logged with the batch's IDs, and a batch
// handler that returns the wrong number of Acks says so at Error (SPEC
// §17: both retry the whole batch).
func TestBatchHandlerMistakesLogged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, msg string
		h         acemq.BatchHandler[OrderPlaced]
	}{
		{name: "panic", msg: "acemq: a handler panicked",
			h: func(context.Context, []*acemq.Message[OrderPlaced]) []acemq.Ack { panic("the pool is gone") }},
		{name: "wrong number of Acks", msg: "acemq: a batch handler returned the wrong number of Acks; the whole batch is retried",
			h: func(context.Context, []*acemq.Message[OrderPlaced]) []acemq.Ack { return []acemq.Ack{acemq.Done()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logs := &errorLog{}
			got, opt := newSettlements()
			c := connect(t, opt, acemq.WithLogger(slog.New(logs)))
			q := acemqtestQueue(t)
			pub := acemq.NewPublisher[OrderPlaced](c, "", q)
			cons, err := acemq.NewBatchConsumer(c, q, tc.h, acemq.BatchSize(2), acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 1}))
			require.NoError(t, err)
			for _, r := range pub.SendAll(ctxT(t), []OrderPlaced{{OrderID: "A-1"}, {OrderID: "A-2"}}) {
				require.NoError(t, r.Err)
			}
			run(t, cons)
			ids := []string{got.next(t).Envelope.ID, got.next(t).Envelope.ID}
			recs := logs.with(tc.msg)
			require.Len(t, recs, 1, "logged once for the batch")
			for _, id := range ids {
				assert.Contains(t, recs[0]["ids"], id)
			}
			if tc.name == "panic" {
				assert.True(t, strings.Contains(recs[0]["stack"], "panic_log_test.go"), recs[0]["stack"])
			}
		})
	}
}

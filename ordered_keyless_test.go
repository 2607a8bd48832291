package acemq_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/acemq/acemq"
)

// keylessLog is the message an ordered consumer logs for each keyless
// message it parks.
const keylessLog = "acemq: an ordered consumer took a message without a key; it is parked"

// warnLog keeps the Warn (and worse) records a Conn logs, with their
// attributes as text.
type warnLog struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (l *warnLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *warnLog) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l *warnLog) WithGroup(string) slog.Handler                 { return l }

func (l *warnLog) Handle(_ context.Context, r slog.Record) error {
	rec := map[string]string{"msg": r.Message, "level": r.Level.String()}
	r.Attrs(func(a slog.Attr) bool {
		rec[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, rec)
	l.mu.Unlock()
	return nil
}

func (l *warnLog) with(msg string) []map[string]string {
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

// A message without a key that reaches an ordered consumer or router is
// parked, never handled: moved to {queue}.parked with a reason naming the
// missing key, how to give one and the publisher's Origin; logged once at
// Warn; counted on acemq.consumer.keyless.total; and, with BlockOnFailure,
// it blocks no key. The keyed messages around it are handled in order.
// With AllowKeyless the same message is handled, and nothing is parked.
func TestOrderedKeylessParked(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		router bool
		allow  bool
	}{
		{name: "consumer"},
		{name: "router", router: true},
		{name: "allow keyless", allow: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			onBrokers(t, func(t *testing.T, url string) {
				const parts = 2
				q := orderedQueue(t, url, parts)
				reader := sdkmetric.NewManualReader()
				logs := &warnLog{}
				got, onSettled := newSettlements()
				c := connectURL(t, url, acemq.WithLogger(slog.New(logs)), acemq.WithOrigin("billing@host-7"),
					acemq.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), onSettled)

				var mu sync.Mutex
				var seen []Step
				handle := func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
					mu.Lock()
					seen = append(seen, m.Payload)
					mu.Unlock()
					return acemq.Done()
				}
				handled := func() []Step { mu.Lock(); defer mu.Unlock(); return append([]Step(nil), seen...) }
				opts := []acemq.ConsumerOption{acemq.Ordered(acemq.OrderPolicy{Partitions: parts, BlockOnFailure: true, AllowKeyless: tc.allow})}
				if tc.router {
					r := acemq.NewRouter(c, q, opts...)
					acemq.Route(r, handle)
					run(t, r)
				} else {
					cons, err := acemq.NewConsumer(c, q, handle, opts...)
					require.NoError(t, err)
					run(t, cons)
				}

				pub := acemq.NewPublisher[Step](c, q, "")
				require.NoError(t, pub.Send(ctxT(t), Step{Key: "a", N: 1}, acemq.Key("a")))
				require.NoError(t, pub.Send(ctxT(t), Step{N: 99})) // no Key, no KeyBy
				require.NoError(t, pub.Send(ctxT(t), Step{Key: "a", N: 2}, acemq.Key("a")))

				var keyless acemq.Settlement
				for range 3 {
					s := got.next(t)
					if s.Envelope.Key == "" {
						keyless = s
					}
				}
				keylessTotal := points(t, reader, "acemq.consumer.keyless.total")
				if tc.allow {
					require.Equal(t, acemq.OutcomeAcked, keyless.Outcome)
					require.ElementsMatch(t, []Step{{Key: "a", N: 1}, {N: 99}, {Key: "a", N: 2}}, handled())
					require.Empty(t, keylessTotal, "AllowKeyless parks nothing, so counts nothing")
					require.Empty(t, logs.with(keylessLog))
					empty(t, c, acemq.ParkingQueue(q))
					return
				}

				require.Equal(t, acemq.OutcomeParked, keyless.Outcome)
				for _, want := range []string{"has no key (header x-acemq-key)", "the Key send option", "the KeyBy publisher option",
					"Origin billing@host-7", "OrderPolicy.AllowKeyless", q} {
					require.Contains(t, keyless.Reason, want)
				}
				parked := take(t, c, acemq.ParkingQueue(q))
				env, err := acemq.EnvelopeOf(parked.Message)
				require.NoError(t, err)
				require.Equal(t, keyless.Envelope.ID, env.ID)
				require.Equal(t, keyless.Reason, env.Error, "the reason travels with the parked message")
				require.Equal(t, "billing@host-7", env.Origin)

				require.Equal(t, []Step{{Key: "a", N: 1}, {Key: "a", N: 2}}, handled(), "the handler never sees a keyless message")
				require.Equal(t, map[string]float64{
					"messaging.destination.name=" + q + " messaging.system=rabbitmq ": 1,
				}, keylessTotal)
				recs := logs.with(keylessLog)
				require.Len(t, recs, 1, "logged once per message")
				require.Equal(t, "WARN", recs[0]["level"])
				require.Equal(t, env.ID, recs[0]["id"])
				require.Equal(t, "billing@host-7", recs[0]["origin"])
				require.Equal(t, q, recs[0]["queue"])

				keys, err := acemq.BlockedKeys(ctxT(t), c, q)
				require.NoError(t, err)
				require.Empty(t, keys, "a keyless message blocks no key")
				// Nothing else waits: the keyless one was moved, not left unacked.
				time.Sleep(100 * time.Millisecond)
				empty(t, c, acemq.ParkingQueue(q))
			})
		})
	}
}

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
)

// TestPeekShowsV1AndV2Alike puts the same envelope on a queue twice: once
// as an earlier build wrote it (wire format v1, every field a reserved
// header mirrored in the properties) and once as the engine writes it now
// (v2, through PublishRaw). peek shows the two alike.
func TestPeekShowsV1AndV2Alike(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			u := b.url(t)
			q := acemqtest.QueueName(t, "peekwire")
			if b.name == "rabbitmq" {
				acemqtest.DeleteQueuesAfter(t, u, q)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			mq, err := acemq.Connect(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = mq.Close() })
			if err := mq.Declare(ctx, acemq.Queue{Name: q}); err != nil {
				t.Fatal(err)
			}
			seen := time.Date(2026, 11, 29, 12, 30, 45, 123456789, time.UTC)
			body := []byte(`{"orderId":"7"}`)
			v1 := transport.Message{
				RoutingKey: q, ContentType: "application/json", Body: body,
				MessageID: "order-7", Type: "OrderPlaced", CorrelationID: "conv-1", AppID: "billing@host1",
				Timestamp: seen.Truncate(time.Second),
				Headers: map[string]any{
					"x-acemq-id": "order-7", "x-acemq-type": "OrderPlaced", "x-acemq-version": int32(2),
					"x-acemq-correlation-id": "conv-1", "x-acemq-causation-id": "cause-1",
					"x-acemq-attempt": int32(3), "x-acemq-first-seen": seen.Format(time.RFC3339Nano),
					"x-acemq-origin": "billing@host1", "x-acemq-error": "boom", "x-region": "eu",
				},
			}
			if err := mq.Transport().Publish(ctx, v1); err != nil {
				t.Fatal(err)
			}
			env := &acemq.Envelope{
				ID: "order-7", Type: "OrderPlaced", Version: 2, CorrelationID: "conv-1", CausationID: "cause-1",
				Attempt: 3, FirstSeen: seen, Origin: "billing@host1", Error: "boom",
				Headers: map[string]any{"x-region": "eu"},
			}
			if err := mq.PublishRaw(ctx, acemq.RawMessage{RoutingKey: q, Envelope: env, Body: body, ContentType: "application/json"}); err != nil {
				t.Fatal(err)
			}

			r := runCLI(t, "-url", u, "peek", q, "-n", "2")
			if r.code != exitOK {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			blocks := strings.Split(r.stdout, "--- ")
			if len(blocks) != 3 {
				t.Fatalf("want two messages shown:\n%s", r.stdout)
			}
			// Each block opens "N of 2"; the rest is the envelope.
			old, now := blocks[1][len("1 of 2"):], blocks[2][len("2 of 2"):]
			now = strings.TrimSuffix(now, "2 messages shown; put back on "+q+"\n")
			if old != now {
				t.Errorf("v1 shows\n%s\nv2 shows\n%s", old, now)
			}
			for _, want := range []string{
				"id           order-7", "type         OrderPlaced (version 2)", "attempt      3",
				"first seen   2026-11-29T12:30:45Z", "origin       billing@host1", "error        boom",
				"correlation  conv-1", "causation    cause-1", "header       x-region = eu",
			} {
				if !strings.Contains(now, want) {
					t.Errorf("the output does not contain %q:\n%s", want, r.stdout)
				}
			}
		})
	}
}

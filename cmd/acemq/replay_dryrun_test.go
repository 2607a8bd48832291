package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/blob"
)

// deadOnes puts n dead letters on a queue's .dlq by hand: IDs dead-0 ...,
// types OrderPlaced and OrderCancelled in turn, attempt 5 and a reason. It
// returns the Conn (open for the test), the work queue and its .dlq, both
// declared and deleted after the test.
func deadOnes(t *testing.T, rawURL string, n int) (mq *acemq.Conn, q, dlq string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q = acemqtest.QueueName(t, "dry")
	dlq = acemq.DeadLetterQueue(q)
	acemqtest.DeleteQueuesAfter(t, rawURL, q)
	mq, err := acemq.Connect(ctx, rawURL, acemq.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mq.Close() })
	if err := mq.Declare(ctx, acemq.Queue{Name: q}, acemq.Queue{Name: dlq}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		env := &acemq.Envelope{ID: fmt.Sprint("dead-", i), Type: []string{"OrderPlaced", "OrderCancelled"}[i%2], Version: 1,
			Attempt: 5, FirstSeen: time.Now().UTC(), Error: "customer 42 does not exist"}
		err := mq.PublishRaw(ctx, acemq.RawMessage{RoutingKey: dlq, Envelope: env, Body: []byte(`{}`), ContentType: "application/json"})
		if err != nil {
			t.Fatal(err)
		}
	}
	return mq, q, dlq
}

// takeAll takes every message off queue and returns their IDs and
// attempts, in order.
func takeAll(t *testing.T, mq *acemq.Conn, queue string) (ids []string, attempts []int) {
	t.Helper()
	for {
		d, ok, err := mq.Transport().Get(context.Background(), queue)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return ids, attempts
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		env, err := acemq.EnvelopeOf(d.Message)
		if err != nil {
			t.Fatal(err)
		}
		ids, attempts = append(ids, env.ID), append(attempts, env.Attempt)
	}
}

// TestReplayDryRun: replay -dry-run lists each message it would move (ID,
// type, reason, destination), with -type too, and moves and acks nothing:
// the source keeps all its messages, in order, untouched, and the target
// gets none.
func TestReplayDryRun(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			u := b.url(t)
			mq, q, dlq := deadOnes(t, u, 4)
			r := runCLI(t, "-url", u, "replay", dlq, q, "-dry-run", "-progress", "0")
			if r.code != exitOK {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			for _, want := range []string{
				"dry run: what a replay from " + dlq + " (4 ready) to " + q + " would move; nothing is moved or acked\n",
				"ID      TYPE            REASON                      TO\n",
				"dead-0  OrderPlaced     customer 42 does not exist  " + q + "\n",
				"dead-1  OrderCancelled  customer 42 does not exist  " + q + "\n",
				"dead-3  OrderCancelled  customer 42 does not exist  " + q + "\n",
				"dry run: would move 4, skipped 0, missing blob 0, failed 0; nothing was moved, " + dlq + " is as it was\n",
			} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("the dry run does not say %q:\n%s", want, r.stdout)
				}
			}
			r = runCLI(t, "-url", u, "replay", dlq, q, "-dry-run", "-type", "OrderCancelled", "-progress", "0")
			if r.code != exitOK || strings.Contains(r.stdout, "dead-0") || !strings.Contains(r.stdout, "dead-3") ||
				!strings.Contains(r.stdout, "would move 2, skipped 2,") {
				t.Errorf("dry run of one type: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if n := readyAfter(t, mq, dlq, 4); n != 4 {
				t.Errorf("%d messages on %s after the dry runs, want all 4", n, dlq)
			}
			if n := ready(t, mq, q); n != 0 {
				t.Errorf("a dry run put %d messages on %s", n, q)
			}
			ids, attempts := takeAll(t, mq, dlq)
			if fmt.Sprint(ids) != "[dead-0 dead-1 dead-2 dead-3]" || fmt.Sprint(attempts) != "[5 5 5 5]" {
				t.Errorf("after the dry runs %s holds %v with attempts %v, want dead-0 ... dead-3 in order, each at attempt 5", dlq, ids, attempts)
			}
		})
	}
}

// TestReplaySkipMissingBlob: with -skip-missing-blob a message whose object
// the store no longer has stays in the dead-letter queue and is reported
// with its ID and object; the others are moved. With -dry-run it is listed
// as staying and nothing moves.
func TestReplaySkipMissingBlob(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			u := b.url(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			mq, q, dlq := deadOnes(t, u, 0)
			dir := t.TempDir()
			s, err := blob.Dir(dir)
			if err != nil {
				t.Fatal(err)
			}
			p := blob.NewPublisher[string](mq, s, "", dlq)
			var lost blob.Ref
			for i, size := range []int{1000, 2000, 3000} {
				ref, err := p.Send(ctx, fmt.Sprint("report-", i), bytes.NewReader(make([]byte, size)))
				if err != nil {
					t.Fatal(err)
				}
				if i == 1 {
					lost = ref
				}
			}
			if err := s.Delete(ctx, lost.ID); err != nil {
				t.Fatal(err)
			}

			r := runCLI(t, "-url", u, "replay", dlq, q, "-store", "dir:"+dir, "-skip-missing-blob", "-dry-run", "-progress", "0")
			if r.code != exitOK {
				t.Fatalf("dry run: exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			for _, want := range []string{"stays on " + dlq + " (the store no longer has its object " + lost.ID + ", 2000 bytes, expires", "would move 2, skipped 0, missing blob 1, failed 0"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("the dry run does not say %q:\n%s", want, r.stdout)
				}
			}
			if n := readyAfter(t, mq, dlq, 3); n != 3 || ready(t, mq, q) != 0 {
				t.Errorf("after the dry run: %d on %s and %d on %s, want 3 and 0", n, dlq, ready(t, mq, q), q)
			}

			r = runCLI(t, "-url", u, "replay", dlq, q, "-store", "dir:"+dir, "-skip-missing-blob", "-progress", "0")
			if r.code != exitOK {
				t.Fatalf("replay: exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			for _, want := range []string{"missing blob: message ", "stays on " + dlq + "; the store no longer has its object " + lost.ID + ", 2000 bytes", "moved 2, skipped 0, failed 0, missing blob 1\n"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("the replay does not say %q:\n%s", want, r.stdout)
				}
			}
			if l, w := readyAfter(t, mq, dlq, 1), ready(t, mq, q); l != 1 || w != 2 {
				t.Errorf("after the replay: %d on %s and %d on %s, want 1 and 2", l, dlq, w, q)
			}
			d, ok, err := mq.Transport().Get(ctx, dlq)
			if err != nil || !ok {
				t.Fatalf("the message left on %s: %v, %v", dlq, ok, err)
			}
			defer func() { _ = d.Nack(true) }()
			if ref, ok := blob.RefOf(d.ContentType, d.Body); !ok || ref.ID != lost.ID {
				t.Errorf("the message left on %s names %+v, want the lost object %s", dlq, ref, lost.ID)
			}
		})
	}
}

func TestReplayFlagsUsage(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "-url", acemqtest.Memory(t), "replay", "a.dlq", "a", "-skip-missing-blob")
	if r.code != exitUsage || !strings.Contains(r.stderr, "-skip-missing-blob needs the store to look in") {
		t.Errorf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

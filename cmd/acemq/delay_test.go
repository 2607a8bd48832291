package main

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

func TestStatsAndPeekShowDelayedMessages(t *testing.T) {
	t.Parallel()
	u := acemqtest.Memory(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mq, err := acemq.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer mq.Close()
	q := acemqtest.QueueName(t, "later")
	if err := mq.Declare(ctx, acemq.Queue{Name: q}); err != nil {
		t.Fatal(err)
	}
	pub := acemq.NewPublisher[acemq.Raw](mq, "", q)
	if err := pub.Send(ctx, acemq.Raw("{}"), acemq.After(time.Hour), acemq.MessageID("in-an-hour")); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, "-url", u, "stats", q)
	if r.code != exitOK {
		t.Fatalf("stats: exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	// An hour is 28,800 units of 125ms: its highest bit is level 14
	// (2048s), so the soonest is due within 2*2048s - 125ms.
	want := regexp.QuoteMeta(`Delayed (acemq.delay.*): 1 waiting, the soonest due within 1h8m15.875s; 0 due, not yet forwarded (`) +
		`\d+` + regexp.QuoteMeta(` forwarders); 0 unroutable at their due time (acemq.delay.unroutable).`)
	if !regexp.MustCompile(want).MatchString(r.stdout) {
		t.Errorf("stats does not match %s:\n%s", want, r.stdout)
	}

	r = runCLI(t, "-url", u, "peek", "acemq.delay.level.14")
	if r.code != exitOK {
		t.Fatalf("peek: exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	for _, line := range []string{
		`(?m)^\s+id\s+in-an-hour$`,
		`(?m)^\s+due\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(in 59m5\d\.\d+s\)$`,
		`(?m)^\s+delayed to\s+the default exchange, key "` + regexp.QuoteMeta(q) + `"$`,
	} {
		if !regexp.MustCompile(line).MatchString(r.stdout) {
			t.Errorf("peek: no line matches %s in:\n%s", line, r.stdout)
		}
	}
}

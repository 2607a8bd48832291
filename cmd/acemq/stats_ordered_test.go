package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
)

// TestStatsOrdered: stats of an ordered queue run by two instances shows
// its partitions (ready, unacked, the active instance), .dlq and .parked,
// both instances with the partitions each holds, and the blocked key with
// its held count, and exits 0.
func TestStatsOrdered(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			u := b.url(t)
			q := acemqtest.QueueName(t, "orders")
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			slow := make(chan struct{}) // the key "slow" waits for it: its 3 messages stay in hand
			sum := sha256.Sum256([]byte("bad"))
			acemqtest.DeleteQueuesAfter(t, u, fmt.Sprintf("%s.held.%x", q, sum[:8]))
			var conns []*acemq.Conn
			for i := range 2 {
				mq, err := acemq.Connect(ctx, u, acemq.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					t.Fatal(err)
				}
				cons, err := acemq.NewConsumer(mq, q, func(_ context.Context, m *acemq.Message[step]) acemq.Ack {
					if m.Payload.Key == "slow" {
						<-slow
					}
					if m.Payload.Key == "bad" {
						return acemq.Reject(errors.New("customer 42 does not exist"))
					}
					return acemq.Done()
				}, acemq.Ordered(acemq.OrderPolicy{Partitions: 4, BlockOnFailure: true}), acemq.Concurrency(4))
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					acemqtest.DeleteAfter(t, u, cons)
				}
				runCtx, stop := context.WithCancel(context.Background())
				ran := make(chan error, 1)
				go func() { ran <- cons.Run(runCtx) }()
				t.Cleanup(func() {
					stop()
					if err := <-ran; err != nil {
						t.Errorf("Run: %v", err)
					}
					_ = mq.Close()
				})
				conns = append(conns, mq)
			}
			t.Cleanup(func() { close(slow) })
			host, _ := os.Hostname()
			instance := regexp.QuoteMeta(fmt.Sprintf("%s/%d/", host, os.Getpid())) + `\d+`
			holding := regexp.MustCompile(`(?m)^` + instance + `\s+\d,\d\s`)
			var r result
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				r = runCLI(t, "-url", u, "stats", q)
				if r.code == exitOK && len(holding.FindAllString(r.stdout, -1)) == 2 {
					break // spread: published now, nothing moves while slow's are in hand
				}
				if time.Now().After(deadline) {
					t.Fatalf("stats never showed two instances holding two partitions each: exit %d\n%s%s", r.code, r.stdout, r.stderr)
				}
			}
			for _, key := range []string{"bad", "slow"} {
				for n := 1; n <= 3; n++ {
					body, _ := json.Marshal(step{Key: key, N: n})
					err := conns[0].Transport().Publish(ctx, transport.Message{Exchange: q, MessageID: fmt.Sprintf("%s-%d", key, n),
						Headers: map[string]any{"x-acemq-key": key}, Body: body, ContentType: "application/json"})
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				r = runCLI(t, "-url", u, "stats", q)
				if r.code == exitOK && strings.Contains(r.stdout, "4 partitions, 2 instances") && strings.Contains(r.stdout, "  3  ") &&
					regexp.MustCompile(`(?m)^bad\s+2\s`).MatchString(r.stdout) && len(holding.FindAllString(r.stdout, -1)) == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("stats never showed slow's 3 messages in hand and the blocked key: exit %d\n%s%s", r.code, r.stdout, r.stderr)
				}
			}
			for _, line := range []string{
				`(?m)^` + regexp.QuoteMeta(q) + `: ordered$`,
				`(?m)^` + regexp.QuoteMeta(q+".dlq") + `\s+dead letters\s+1\s+0\s*$`,
				`(?m)^` + regexp.QuoteMeta(q+".parked") + `\s+parked\s+0\s+0\s*$`,
				`(?m)^INSTANCE\s+PARTITIONS\s+UNACKED\s+SEEN$`,
				`(?m)^` + regexp.QuoteMeta(q+".p") + `\d\s+partition \d\s+0\s+3\s+1\s+` + instance + `$`, // slow's
				`(?m)^` + instance + `\s+\d,\d\s+3\s`,
				`(?m)^bad\s+2\s+\S+\s+bad-1$`,
			} {
				if !regexp.MustCompile(line).MatchString(r.stdout) {
					t.Errorf("no line matches %s in:\n%s", line, r.stdout)
				}
			}
			partitions := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(q+".p") + `\d\s+partition \d\s+0\s+[03]\s+1\s+` + instance + `$`)
			if n := len(partitions.FindAllString(r.stdout, -1)); n != 4 {
				t.Errorf("%d partition lines with an active instance, want 4:\n%s", n, r.stdout)
			}
			if strings.Contains(r.stdout, "retry") {
				t.Errorf("stats of an ordered queue lists retry tiers:\n%s", r.stdout)
			}
		})
	}
}

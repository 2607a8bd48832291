package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

// result is what one run of the command produced.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the command with args, as main would, and returns what it
// printed.
// The tests run the command in the process that holds their memory://
// brokers, so they may name one.
func init() { memoryInProcess = true }

func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// brokers are the brokers the command tests run on: the in-process one
// always, RabbitMQ when acemqtest finds one (skipped otherwise).
var brokers = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"memory", func(t *testing.T) string { return acemqtest.Memory(t) }},
	{"rabbitmq", func(t *testing.T) string { return acemqtest.RabbitMQ(t) }},
}

// deadLetters fills queue.dlq the way a service does: a consumer of queue
// whose handler rejects every message, one message per type in types. It
// returns a Conn that stays open for the test, so a memory:// broker lives
// on for the command to find.
func deadLetters(t *testing.T, rawURL, queue string, types ...string) *acemq.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acemqtest.DeleteQueuesAfter(t, rawURL, tierNames(queue)...)
	var mu sync.Mutex
	settled := 0
	done := make(chan struct{})
	mq, err := acemq.Connect(ctx, rawURL, acemq.WithLogger(slog.New(slog.DiscardHandler)), acemq.OnSettled(func(context.Context, acemq.Settlement) {
		mu.Lock()
		defer mu.Unlock()
		if settled++; settled == len(types) {
			close(done)
		}
	}))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = mq.Close() })
	cons, err := acemq.NewConsumer(mq, queue, func(_ context.Context, m *acemq.Message[acemq.Raw]) acemq.Ack {
		return acemq.Reject(errors.New("customer 42 does not exist"))
	})
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(runCtx) }()
	for i, typ := range types {
		pub := acemq.NewPublisher[acemq.Raw](mq, "", queue, acemq.TypeName(typ), acemq.ContentType("application/json"))
		body := acemq.Raw(`{"n":` + string(rune('0'+i%10)) + `,"pad":"` + strings.Repeat("x", 300) + `"}`)
		if err := pub.Send(ctx, body, acemq.MessageID(typ+"-"+string(rune('a'+i))), acemq.Header("x-region", "eu"), acemq.Key("key-"+typ)); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("the messages did not all settle: %v", ctx.Err())
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatalf("run: %v", err)
	}
	return mq
}

// tierNames is queue and its default retry tiers, for DeleteQueuesAfter
// (which deletes .dlq and .parked by itself).
func tierNames(queue string) []string {
	names := []string{queue}
	for _, d := range acemq.DefaultRetryPolicy().Delays {
		names = append(names, acemq.RetryQueue(queue, d))
	}
	return names
}

// ready is the number of ready messages on queue.
func ready(t *testing.T, mq *acemq.Conn, queue string) int {
	t.Helper()
	info, err := mq.Transport().Inspect(context.Background(), queue)
	if err != nil {
		t.Fatalf("inspect %s: %v", queue, err)
	}
	return info.Messages
}

// readyAfter is ready once it reads want, or after 10 s: messages the CLI
// put back with a nack, or left unsettled when it closed its connection,
// are counted by the broker a moment later.
func readyAfter(t *testing.T, mq *acemq.Conn, queue string, want int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := ready(t, mq, queue)
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	mem := acemqtest.Memory(t)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string // a part of what must be printed there
	}{
		{"no command", nil, exitUsage, "no command given"},
		{"unknown command", []string{"purge", "orders"}, exitUsage, `unknown command "purge"`},
		{"unknown global flag", []string{"-verbose", "stats", "q"}, exitUsage, "flag provided but not defined"},
		{"stats without queues", []string{"-url", mem, "stats"}, exitUsage, "name at least one queue"},
		{"stats bad delays", []string{"-url", mem, "stats", "-delays", "soon", "q"}, exitUsage, `"soon" is not a duration`},
		{"stats zero delay", []string{"-url", mem, "stats", "-delays", "0s", "q"}, exitUsage, "not positive"},
		{"peek without a queue", []string{"-url", mem, "peek"}, exitUsage, "name exactly one queue"},
		{"peek two queues", []string{"-url", mem, "peek", "a", "b"}, exitUsage, "name exactly one queue"},
		{"peek n zero", []string{"-url", mem, "peek", "q", "-n", "0"}, exitUsage, "-n must be between 1 and 500"},
		{"peek n too many", []string{"-url", mem, "peek", "-n", "501", "q"}, exitUsage, "not 501"},
		{"peek n not a number", []string{"-url", mem, "peek", "q", "-n", "ten"}, exitUsage, "invalid value"},
		{"replay one queue", []string{"-url", mem, "replay", "q.dlq"}, exitUsage, "name the queue to move from"},
		{"replay to itself", []string{"-url", mem, "replay", "q", "q"}, exitUsage, "to itself"},
		{"replay negative limit", []string{"-url", mem, "replay", "a", "b", "-limit", "-1"}, exitUsage, "-limit must not be negative"},
		{"replay negative rate", []string{"-url", mem, "replay", "-rate", "-5", "a", "b"}, exitUsage, "-rate must not be negative"},
		{"zero timeout", []string{"-url", mem, "-timeout", "0s", "stats", "q"}, exitUsage, "-timeout must be positive"},
		{"unsupported scheme", []string{"-url", "nats://x", "stats", "q"}, exitFailure, `unsupported URL scheme "nats"`},
		{"peek of a missing queue", []string{"-url", mem, "peek", "nowhere"}, exitFailure, `acemq: peek: memory: get: no queue named "nowhere"`},
		{"replay from a missing queue", []string{"-url", mem, "replay", "nowhere", "q"}, exitFailure, `acemq: replay: the queue to move from, nowhere: memory: inspect: no queue named "nowhere"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, tt.args...)
			if r.code != tt.code {
				t.Errorf("exit status %d, want %d; stderr:\n%s", r.code, tt.code, r.stderr)
			}
			if !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("stderr does not say %q:\n%s", tt.stderr, r.stderr)
			}
			if !strings.HasPrefix(r.stderr, "acemq: ") && tt.code != exitUsage {
				t.Errorf("stderr does not start with \"acemq: \":\n%s", r.stderr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"help command", []string{"help"}, "usage: acemq"},
		{"global -h", []string{"-h"}, "usage: acemq"},
		{"command -h", []string{"replay", "-h"}, "-limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, tt.args...)
			if r.code != exitOK {
				t.Errorf("exit status %d, want 0", r.code)
			}
			if !strings.Contains(r.stdout+r.stderr, tt.want) {
				t.Errorf("the help does not mention %q:\n%s%s", tt.want, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout+r.stderr, "guest:guest") {
				t.Errorf("the help prints the default password:\n%s%s", r.stdout, r.stderr)
			}
		})
	}
}

// The broker comes from $ACEMQ_RABBITMQ_URL when -url is not given.
func TestURLFromEnvironment(t *testing.T) {
	mem := acemqtest.Memory(t)
	mq := deadLetters(t, mem, "env-orders", "OrderPlaced")
	t.Setenv("ACEMQ_RABBITMQ_URL", mem)
	r := runCLI(t, "stats", "env-orders")
	if r.code != exitOK {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "env-orders.dlq") || ready(t, mq, "env-orders.dlq") != 1 {
		t.Errorf("stats did not find the queues of %s:\n%s", mem, r.stdout)
	}
}

// A password in the URL never reaches the output, whatever fails.
func TestPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(acemqtest.RabbitMQ(t))
	if err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-hunter2"
	u.User = url.UserPassword("acemq-nobody", secret)
	tests := []struct {
		name string
		args []string
	}{
		{"login refused", []string{"-url", u.String(), "stats", "q"}},
		{"nothing listening", []string{"-url", "amqp://acemq-nobody:" + secret + "@127.0.0.1:1/", "-timeout", "2s", "peek", "q"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, tt.args...)
			if r.code != exitFailure {
				t.Errorf("exit status %d, want 1", r.code)
			}
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("the password was printed:\n%s%s", r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr, "xxxxx") {
				t.Errorf("the error does not name the (redacted) broker:\n%s", r.stderr)
			}
		})
	}
}

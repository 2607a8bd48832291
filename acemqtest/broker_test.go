package acemqtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest/internal/login"
	"github.com/acemq/acemq/acemqtest/internal/starter"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestRabbitMQAnswers(t *testing.T) {
	url := RabbitMQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := login.AMQP(ctx, url); err != nil {
		t.Fatalf("RabbitMQ returned %s, which does not answer: %v", acemq.Redact(url), err)
	}
}

// The broker RabbitMQ returns has the consistent-hash exchange that
// ordered consumers need: the machine's broker by setup, a container
// because acemqtest enables the plugin in it.
func TestRabbitMQHasConsistentHash(t *testing.T) {
	url := RabbitMQ(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	x := QueueName(t, "hash")
	if err := ch.ExchangeDeclare(x, "x-consistent-hash", false, true, false, false, nil); err != nil {
		t.Fatalf("declaring an x-consistent-hash exchange: %v", err)
	}
	if err := ch.ExchangeDelete(x, false, false); err != nil {
		t.Fatal(err)
	}
}

func TestPostgresAnswers(t *testing.T) {
	url := Postgres(t)
	if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		t.Fatalf("Postgres returned %q, not a postgres URL", url)
	}
}

func TestProbesFailOnAClosedPort(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	tests := []struct {
		name  string
		probe func() error
	}{
		{"amqp", func() error { return login.AMQP(ctx, "amqp://guest:guest@"+addr+"/") }},
		{"postgres", func() error { return probePostgres(ctx, addr) }},
	}
	for _, tt := range tests {
		if err := tt.probe(); err == nil {
			t.Errorf("%s probe of a closed port succeeded", tt.name)
		}
	}
}

func TestPostgresProbeRefusesAnotherServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var b [8]byte
		_, _ = c.Read(b[:])
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n"))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := probePostgres(ctx, ln.Addr().String()); err == nil {
		t.Fatal("the probe took an HTTP server for PostgreSQL")
	}
}

func TestMissingSkipsUnlessRequired(t *testing.T) {
	tests := []struct {
		name    string
		require string
		skipped bool
	}{
		{name: "optional", require: "", skipped: true},
		{name: "required", require: "1", skipped: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("ACEMQ_REQUIRE_BROKER", tt.require)
			fake := &recorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				missing(fake, "no broker here")
			}()
			<-done
			if fake.skipped != tt.skipped || fake.failed == tt.skipped {
				t.Fatalf("skipped=%v failed=%v, want skipped=%v", fake.skipped, fake.failed, tt.skipped)
			}
			if !strings.Contains(fake.msg, "no broker here") {
				t.Fatalf("the message %q does not give the reason", fake.msg)
			}
		})
	}
}

// recorder records Skipf and Fatalf and ends only its own goroutine.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, sprintf(format, args...)
	runtime.Goexit()
}

func TestDeleteQueuesAfterDeletesDerivedQueues(t *testing.T) {
	url := RabbitMQ(t)
	base := QueueName(t, "cleanup")
	names := []string{base, base + ".dlq", base + ".parked", base + ".retry.5s"}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := ch.QueueDeclare(n, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("inner", func(t *testing.T) {
		DeleteQueuesAfter(t, url, base, base+".retry.5s", base+".never-declared")
	})
	for _, n := range names {
		if _, err := ch.QueueDeclarePassive(n, true, false, false, false, nil); err == nil {
			t.Errorf("queue %q still exists", n)
			_, _ = ch.QueueDelete(n, false, false, false)
		} else if ch, err = conn.Channel(); err != nil {
			t.Fatal(err)
		}
	}
}

// cleanups counts the cleanups registered on it instead of running them.
type cleanups struct {
	testing.TB
	n int
}

func (c *cleanups) Cleanup(func()) { c.n++ }

func TestDeleteQueuesAfterIgnoresMemory(t *testing.T) {
	t.Parallel()
	c := &cleanups{TB: t}
	DeleteQueuesAfter(c, Memory(t), "q")
	if c.n != 0 {
		t.Errorf("DeleteQueuesAfter registered %d cleanups for a memory:// URL; want none", c.n)
	}
	DeleteQueuesAfter(c, LocalRabbitMQ, "q")
	if c.n != 1 {
		t.Errorf("DeleteQueuesAfter registered %d cleanups for an amqp:// URL; want 1", c.n)
	}
}

// closedAddr returns host:port where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// When neither the environment nor this machine has a broker or database,
// the search turns to the container hook: without acemqtest/container
// linked (a nil hook) the skip says which import adds it; with a hook, its
// URL is used, and its error is the reason.
func TestTheSearchEndsWithTheContainerHook(t *testing.T) {
	t.Setenv("ACEMQ_RABBITMQ_URL", "")
	t.Setenv("ACEMQ_POSTGRES_URL", "")
	t.Setenv("ACEMQ_REQUIRE_BROKER", "")
	closed := closedAddr(t)
	searches := map[string]func(start func() (string, error)) (string, string){
		"rabbitmq": func(start func() (string, error)) (string, string) {
			return findRabbitMQ("amqp://guest:guest@"+closed+"/", start)
		},
		"postgres": func(start func() (string, error)) (string, string) {
			return findPostgres(closed, "postgres://postgres@"+closed+"/test", start)
		},
	}
	for name, search := range searches {
		t.Run(name+"/not linked", func(t *testing.T) {
			url, reason := search(nil)
			if url != "" {
				t.Fatalf("found %q", url)
			}
			fake := &recorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				missing(fake, reason)
			}()
			<-done
			if !fake.skipped {
				t.Fatalf("not skipped: %q", fake.msg)
			}
			for _, want := range []string{containerImport, closed, "does not answer"} {
				if !strings.Contains(fake.msg, want) {
					t.Errorf("the skip message %q does not say %q", fake.msg, want)
				}
			}
		})
		t.Run(name+"/linked", func(t *testing.T) {
			url, reason := search(func() (string, error) { return "from-the-container", nil })
			if url != "from-the-container" || reason != "" {
				t.Fatalf("found %q (%q), want the container's URL", url, reason)
			}
			url, reason = search(func() (string, error) { return "", errors.New("no Docker engine answers") })
			if url != "" || !strings.Contains(reason, "no Docker engine answers") || strings.Contains(reason, containerImport) {
				t.Fatalf("found %q, reason %q; want the hook's error and not the import", url, reason)
			}
		})
	}
}

// Cleanup runs the hook acemqtest/container registers, reports its error,
// and without one removes nothing and fails nothing.
func TestCleanupRunsTheHook(t *testing.T) {
	saved := starter.Cleanup
	t.Cleanup(func() { starter.Cleanup = saved })
	starter.Cleanup = nil
	if err := Cleanup(); err != nil {
		t.Fatalf("without the container package: %v", err)
	}
	calls := 0
	starter.Cleanup = func() error { calls++; return errors.New("removing container 0123456789ab: engine gone") }
	err := Cleanup()
	if calls != 1 || err == nil || !strings.HasPrefix(err.Error(), "acemqtest: ") || !strings.Contains(err.Error(), "0123456789ab") {
		t.Fatalf("%d calls, error %v; want one call and the hook's error", calls, err)
	}
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// Cleanup resets the finders: a search runs once, and again after a reset.
func TestCleanupForgets(t *testing.T) {
	var f finder
	searches := 0
	search := func() (string, string) { searches++; return "amqp://found/", "" }
	f.find(search)
	f.find(search)
	if searches != 1 {
		t.Fatalf("%d searches before a reset, want 1", searches)
	}
	f.reset()
	if u, _ := f.find(search); u != "amqp://found/" || searches != 2 {
		t.Fatalf("after a reset: %q after %d searches, want a second search", u, searches)
	}
}

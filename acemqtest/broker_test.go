package acemqtest

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestRabbitMQAnswers(t *testing.T) {
	url := RabbitMQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := probeAMQP(ctx, url); err != nil {
		t.Fatalf("RabbitMQ returned %s, which does not answer: %v", acemq.Redact(url), err)
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
		{"amqp", func() error { return probeAMQP(ctx, "amqp://guest:guest@"+addr+"/") }},
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

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

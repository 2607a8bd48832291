package netproxy_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acemq/acemq/acemqtest/netproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves one line-echoing listener until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

func TestPauseResumeCut(t *testing.T) {
	p, err := netproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(line string, within time.Duration) (string, error) {
		if _, err := io.WriteString(c, line+"\n"); err != nil {
			return "", err
		}
		_ = c.SetReadDeadline(time.Now().Add(within))
		return r.ReadString('\n')
	}
	if got, err := roundTrip("one", 5*time.Second); err != nil || got != "one\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Pause()
	if got, err := roundTrip("two", 300*time.Millisecond); err == nil {
		t.Fatalf("while paused the echo came back: %q", got)
	}
	p.Resume()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after Resume the held line: %q, %v", got, err)
	}
	p.Cut()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("a cut connection still reads")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestStopStartAndPauseDownstream(t *testing.T) {
	p, err := netproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Stop()
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("a stopped proxy took a connection")
	}
	if err := p.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("after Start, on the same address: %v", err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	p.PauseDownstream()
	if _, err := io.WriteString(c, "held\n"); err != nil {
		t.Fatalf("writing while the downstream is held: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if got, err := r.ReadString('\n'); err == nil {
		t.Fatalf("while the downstream is held the echo came back: %q", got)
	}
	p.Resume()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after Resume the held echo: %q, %v", got, err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Start(); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

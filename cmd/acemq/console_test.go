package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
)

// lockedBuffer is a bytes.Buffer the command writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var consoleLink = regexp.MustCompile(`at (http://\S+)`)

// TestConsoleServesUntilInterrupted: acemq console on an ephemeral
// loopback port serves the page and the overview of the queues named,
// and stops cleanly when its ctx ends.
func TestConsoleServesUntilInterrupted(t *testing.T) {
	t.Parallel()
	url := acemqtest.Memory(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"-url", url, "console", "-addr", "127.0.0.1:0", "-token", "t0k", "orders"}, &out, &errOut)
	}()
	var link string
	for deadline := time.Now().Add(10 * time.Second); link == ""; time.Sleep(10 * time.Millisecond) {
		if m := consoleLink.FindStringSubmatch(out.String()); m != nil {
			link = m[1]
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no link printed: %q %q", out.String(), errOut.String())
		}
	}
	if !strings.Contains(link, "?token=t0k") {
		t.Errorf("output %q: want the link with its token", out.String())
	}
	res, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(page), "read-only") {
		t.Errorf("page: %d %s", res.StatusCode, page)
	}
	if res, err := http.Get(strings.Split(link, "?")[0] + "api/overview"); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %v %v", res, err)
	} else {
		_ = res.Body.Close()
	}
	cancel()
	if c := <-code; c != exitOK {
		t.Errorf("exit %d, stderr %s", c, errOut.String())
	}
}

// TestConsoleRefusesAnOpenAddressWithoutAToken: any address but loopback
// needs -token.
func TestConsoleRefusesAnOpenAddressWithoutAToken(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:8080"} {
		r := runCLI(t, "-url", acemqtest.Memory(t), "console", "-addr", addr)
		if r.code != exitUsage || !strings.Contains(r.stderr, "-token") {
			t.Errorf("-addr %s: exit %d, stderr %q; want a usage error naming -token", addr, r.code, r.stderr)
		}
	}
}

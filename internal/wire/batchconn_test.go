package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// What is written through a batch conn reaches the socket whole and in
// order, however the writes were cut.
func TestBatchConnKeepsOrder(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	c := NewBatchConn(a)
	var want bytes.Buffer
	got := make(chan []byte, 1)
	go func() { all, _ := io.ReadAll(b); got <- all }()
	for i := range 2000 {
		p := []byte(fmt.Sprintf("frame %d;", i))
		want.Write(p)
		if n, err := c.Write(p); err != nil || n != len(p) {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	// Close waits for the flusher, which is then done writing; closing the
	// socket under a flusher still writing would cut the stream, so wait
	// for the reader to have everything first.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := c.(*batchConn)
		c.mu.Lock()
		idle := !c.flushing && len(c.pending) == 0
		c.mu.Unlock()
		if idle || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if all := <-got; !bytes.Equal(all, want.Bytes()) {
		t.Fatalf("the socket got %d bytes, want %d in order", len(all), want.Len())
	}
}

// A socket error is not the failing Write's (it has returned) but every
// later one's, and Close still returns with the flusher ended.
func TestBatchConnSocketErrorIsSticky(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	_ = b.Close()
	c := NewBatchConn(a)
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatalf("the first write should only queue, got %v", err)
	}
	var err error
	for deadline := time.Now().Add(10 * time.Second); err == nil && time.Now().Before(deadline); {
		_, err = c.Write([]byte("x"))
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("a later write got %v, want the socket's error", err)
	}
	if _, again := c.Write([]byte("y")); !errors.Is(again, io.ErrClosedPipe) {
		t.Fatalf("the error is not sticky: %v", again)
	}
	_ = c.Close()
	if _, err := c.Write([]byte("z")); err == nil {
		t.Fatal("a write after Close succeeded")
	}
}

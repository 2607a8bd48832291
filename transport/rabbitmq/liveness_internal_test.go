package rabbitmq

import (
	"errors"
	"net"
	"testing"
	"time"
)

// Bytes that arrive after a silence past the timeout (a process resumed
// after a freeze reads what the broker sent long ago) do not count as
// hearing the broker, and the connection reads nothing more.
func TestHearingRefusesBytesAfterASilence(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	h := newHearing()
	h.setHeartbeat(40 * time.Millisecond) // timeout 60ms
	c := h.wrap(client)
	send := func() {
		go func() { _, _ = server.Write([]byte("frame")) }()
	}
	buf := make([]byte, 16)
	send()
	if n, err := c.Read(buf); n != 5 || err != nil {
		t.Fatalf("a read in time = %d, %v", n, err)
	}
	heard := h.last()
	time.Sleep(150 * time.Millisecond)
	send()
	if n, err := c.Read(buf); n != 0 || !errors.Is(err, errSilent) {
		t.Fatalf("a read after a silence past the timeout = %d, %v; want 0, errSilent", n, err)
	}
	if !h.last().Equal(heard) {
		t.Errorf("the late read moved the last hearing from %v to %v", heard, h.last())
	}
	send()
	if _, err := c.Read(buf); !errors.Is(err, errSilent) {
		t.Errorf("a read after the silence was found = %v; want errSilent again", err)
	}
}

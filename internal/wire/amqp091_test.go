package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
	amqp "github.com/rabbitmq/amqp091-go"
)

// fakeBroker is the broker's side of a handshake over a net.Pipe: just
// enough of AMQP for amqp091-go to open a connection and a channel, start
// a consumer and then read one delivery whose content header is the frame
// under test.
type fakeBroker struct {
	conn net.Conn
	r    *bufio.Reader
}

func method(class, id uint16, args []byte) []byte {
	p := binary.BigEndian.AppendUint16(nil, class)
	p = binary.BigEndian.AppendUint16(p, id)
	p = append(p, args...)
	return rawFrame(1, p)
}

func rawFrame(typ byte, payload []byte) []byte {
	f := []byte{typ, 0, 0}
	if typ != 1 || len(payload) < 2 || binary.BigEndian.Uint16(payload) != 10 {
		f[2] = 1 // everything but connection methods goes on channel 1
	}
	f = binary.BigEndian.AppendUint32(f, uint32(len(payload)))
	f = append(f, payload...)
	return append(f, frameEnd)
}

func shortstr(s string) []byte { return append([]byte{byte(len(s))}, s...) }

func longstr(s string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...)
}

// next reads one frame from the client and returns its class and method
// (zero for a frame that is not a method).
func (b *fakeBroker) next() (uint16, uint16, error) {
	var hdr [7]byte
	if _, err := io.ReadFull(b.r, hdr[:]); err != nil {
		return 0, 0, err
	}
	payload := make([]byte, binary.BigEndian.Uint32(hdr[3:])+1)
	if _, err := io.ReadFull(b.r, payload); err != nil {
		return 0, 0, err
	}
	if hdr[0] != 1 || len(payload) < 5 {
		return 0, 0, nil
	}
	return binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:]), nil
}

// expect reads client frames until the method class.id arrives.
func (b *fakeBroker) expect(class, id uint16) error {
	for {
		c, m, err := b.next()
		if err != nil {
			return err
		}
		if c == class && m == id {
			return nil
		}
	}
}

// serve plays the broker: the handshake, a channel, a consumer, and then
// one delivery carrying header, after which it drains the client until the
// pipe closes.
func (b *fakeBroker) serve(header []byte) error {
	if _, err := io.ReadFull(b.r, make([]byte, 8)); err != nil { // "AMQP" 0 0 9 1
		return err
	}
	steps := []struct {
		send         []byte
		class, reply uint16
	}{
		{method(10, 10, append(append([]byte{0, 9, 0, 0, 0, 0}, longstr("PLAIN")...), longstr("en_US")...)), 10, 11},
		{method(10, 30, []byte{0, 0, 1, 0, 0, 0, 0, 0}), 10, 40}, // tune: frame-max 16 MiB, no heartbeat
		{method(10, 41, shortstr("")), 20, 10},
		{method(20, 11, longstr("")), 60, 20},
	}
	for _, s := range steps {
		if _, err := b.conn.Write(s.send); err != nil {
			return err
		}
		if err := b.expect(s.class, s.reply); err != nil {
			return err
		}
	}
	deliver := append(shortstr("c"), 0, 0, 0, 0, 0, 0, 0, 1, 0)
	deliver = append(append(deliver, shortstr("")...), shortstr("k")...)
	stream := append(method(60, 21, shortstr("c")), method(60, 60, deliver)...)
	stream = append(append(stream, header...), bodyFrame([]byte("{}\n"))...)
	if _, err := b.conn.Write(stream); err != nil {
		return err
	}
	for {
		if _, _, err := b.next(); err != nil {
			return nil
		}
	}
}

// amqp091Reads reports whether amqp091-go reads a delivery whose content
// header frame is header (as headerFrame builds it), and the headers it
// read.
func amqp091Reads(t *testing.T, header []byte) (amqp.Table, bool) {
	t.Helper()
	client, server := net.Pipe()
	b := &fakeBroker{conn: server, r: bufio.NewReader(server)}
	served := make(chan error, 1)
	go func() { served <- b.serve(header) }()
	defer func() {
		_ = server.Close()
		if err := <-served; err != nil && !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("fake broker: %v", err)
		}
	}()
	conn, err := amqp.Open(client, amqp.Config{FrameSize: 1 << 24, SASL: []amqp.Authentication{&amqp.PlainAuth{Username: "u", Password: "p"}}})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer func() { _ = client.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	deliveries, err := ch.Consume("q", "c", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	select {
	case d, ok := <-deliveries:
		return d.Headers, ok
	case <-time.After(10 * time.Second):
		t.Fatal("amqp091 neither read the delivery nor failed the connection")
	}
	return nil, false
}

// isAcemqRule reports whether a guard refusal is one of acemq's own rules
// rather than a table amqp091 cannot parse: a limit (amqp091 counts
// distinct names, so a table repeating a name may pass its count and not
// acemq's), or an array running past its table, which amqp091 reads
// leniently and the guard refuses as not well-formed AMQP.
func isAcemqRule(problem error) bool {
	s := problem.Error()
	return strings.Contains(s, "nested deeper") || strings.Contains(s, "more than") || errors.Is(problem, errArrayOverrun)
}

// differential checks one table body against amqp091-go's reader: a frame
// the guard passes is one amqp091 reads; one it refuses is one amqp091
// cannot read, or one over acemq's limits or not well-formed (isAcemqRule); and whatever the guard hands
// out, amqp091 reads.
func differential(t *testing.T, table []byte) {
	frame := headerFrame(table)
	out := guardHeaderFrame(frame)
	passed := bytes.Equal(out, frame)
	_, reads := amqp091Reads(t, frame)
	problem := checkTable(table, 0)
	switch {
	case passed && !reads:
		t.Fatalf("the guard passed a header amqp091 cannot read: %x", table)
	case !passed && problem == nil:
		t.Fatalf("the guard rewrote a table it finds readable: %x", table)
	case !passed && reads && !isAcemqRule(problem):
		t.Fatalf("the guard refused a header amqp091 reads (%v): %x", problem, table)
	}
	if !passed {
		h, ok := amqp091Reads(t, out)
		if !ok {
			t.Fatalf("amqp091 cannot read the guard's replacement for %x", table)
		}
		if _, ok := h[transport.UnreadableHeaders]; !ok || len(h) != 1 {
			t.Fatalf("the replacement reads as %v", h)
		}
	}
}

func TestGuardAgreesWithAMQP091(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		table []byte
	}{
		{"plain", entry("x-tenant", field('S', []byte("alpha")))},
		{"every fixed type", bytes.Join([][]byte{
			entry("t", []byte{'t', 1}), entry("b", []byte{'b', 1}), entry("B", []byte{'B', 1}),
			entry("s", []byte{'s', 0, 1}), entry("u", []byte{'u', 0, 1}), entry("I", []byte{'I', 0, 0, 0, 1}),
			entry("i", []byte{'i', 0, 0, 0, 1}), entry("l", []byte{'l', 0, 0, 0, 0, 0, 0, 0, 1}),
			entry("f", []byte{'f', 0, 0, 0, 0}), entry("d", []byte{'d', 0, 0, 0, 0, 0, 0, 0, 0}),
			entry("D", []byte{'D', 2, 0, 0, 0, 5}), entry("T", []byte{'T', 0, 0, 0, 0, 0, 0, 0, 1}),
			entry("V", []byte{'V'}), entry("x", field('x', []byte{0, 1})),
		}, nil)},
		{"32 levels", nested(32)},
		{"33 levels", nested(33)},
		{"8192 entries", wide(8192)},
		{"8193 entries", wide(8193)},
		{"an array of 8193", entry("a", field('A', bytes.Repeat([]byte{'V'}, 8193)))},
		{"an unknown type", entry("z", []byte{'Z', 1})},
		{"truncated", entry("s", []byte{'S', 0, 0, 0, 9, 'a'})},
		{"a name past the end", []byte{9, 'a'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			differential(t, tc.table)
		})
	}
}

// FuzzGuardAgainstAMQP091 is the guard's differential test: fuzzed headers
// tables in a well-formed content header, read by amqp091-go itself.
func FuzzGuardAgainstAMQP091(f *testing.F) {
	f.Add(nested(3))
	f.Add(nested(33))
	f.Add(wide(5))
	f.Add([]byte{1, 'a', 'A', 0, 0, 0, 2, 'F', 0})
	f.Add(entry("d", []byte{'D', 2, 0, 0, 0, 5}))
	f.Add(entry("x", field('x', []byte("bytes"))))
	f.Fuzz(func(t *testing.T, table []byte) {
		if len(table) > 1<<16 {
			return // the frame must fit the fake broker's frame-max with room
		}
		differential(t, table)
	})
}

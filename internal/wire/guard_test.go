package wire

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/acemq/acemq/transport"
)

// encTable encodes entries (already encoded as name+field) as a table body.
func field(typ byte, body []byte) []byte {
	b := []byte{typ}
	if typ == 'S' || typ == 'F' || typ == 'A' || typ == 'x' {
		b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	}
	return append(b, body...)
}

func entry(name string, f []byte) []byte {
	return append(append([]byte{byte(len(name))}, name...), f...)
}

// nested returns a table body nested depth levels below the top one.
func nested(depth int) []byte {
	inner := entry("leaf", field('S', []byte("x")))
	for range depth {
		inner = entry("n", field('F', inner))
	}
	return inner
}

// wide returns a table body of n int32 entries.
func wide(n int) []byte {
	var b []byte
	for i := range n {
		b = append(b, entry(string(rune('a'+i%26))+strings.Repeat("k", i%7), field('I', []byte{0, 0, 0, 1}))...)
	}
	return b
}

// headerFrame builds a content header frame with a content type and the
// given headers table body.
func headerFrame(table []byte) []byte {
	p := []byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3} // class basic, weight, body size 3
	p = binary.BigEndian.AppendUint16(p, 0x8000|flagHeaders|0x1000)
	p = append(p, byte(len("application/json")))
	p = append(p, "application/json"...)
	p = binary.BigEndian.AppendUint32(p, uint32(len(table)))
	p = append(p, table...)
	p = append(p, 2) // delivery mode
	f := []byte{frameHeader, 0, 1}
	f = binary.BigEndian.AppendUint32(f, uint32(len(p)))
	f = append(f, p...)
	return append(f, frameEnd)
}

func bodyFrame(body []byte) []byte {
	f := []byte{3, 0, 1}
	f = binary.BigEndian.AppendUint32(f, uint32(len(body)))
	f = append(f, body...)
	return append(f, frameEnd)
}

// through sends stream through a frameGuard and returns what it hands out,
// read in small pieces to exercise the partial reads.
func through(t *testing.T, stream []byte) []byte {
	t.Helper()
	a, b := net.Pipe()
	go func() { _, _ = a.Write(stream); a.Close() }()
	g := newFrameGuard(b)
	defer g.Close()
	var out bytes.Buffer
	buf := make([]byte, 5)
	for {
		n, err := g.Read(buf)
		out.Write(buf[:n])
		if err == io.EOF {
			return out.Bytes()
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	}
}

func TestFrameGuardPassesReadableFramesUntouched(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream []byte
	}{
		{"plain headers", append(headerFrame(entry("x-tenant", field('S', []byte("alpha")))), bodyFrame([]byte("{}"))...)},
		{"32 levels", headerFrame(nested(32))},
		{"8192 entries", headerFrame(wide(8192))},
		{"method and heartbeat frames", append(bodyFrame(bytes.Repeat([]byte{7}, 300)), 8, 0, 0, 0, 0, 0, 0, frameEnd)},
		{"a protocol refusal", []byte("AMQP\x00\x00\x09\x01")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := through(t, tc.stream); !bytes.Equal(got, tc.stream) {
				t.Fatalf("the guard changed a readable stream (%d bytes in, %d out)", len(tc.stream), len(got))
			}
		})
	}
}

func TestFrameGuardReplacesUnreadableHeaders(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		table      []byte
	}{
		{"33 levels", "nested deeper than 32 levels", nested(33)},
		{"100 levels", "nested deeper than 32 levels", nested(100)},
		{"8193 entries", "more than 8192 entries", wide(8193)},
		{"an array of 9000", "more than 8192 elements", entry("a", field('A', bytes.Repeat([]byte{'V'}, 9000)))},
		{"an unknown type", "unknown type", entry("z", []byte{'Z', 1})},
		{"truncated", "runs past the end", entry("s", []byte{'S', 0, 0, 0, 9, 'a'})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := bodyFrame([]byte("{}"))
			got := through(t, append(headerFrame(tc.table), body...))
			if !bytes.HasSuffix(got, body) {
				t.Fatal("the body frame after the header did not come through intact")
			}
			hf := got[:len(got)-len(body)]
			size := binary.BigEndian.Uint32(hf[3:7])
			if int(size) != len(hf)-8 || hf[len(hf)-1] != frameEnd {
				t.Fatalf("the rewritten frame is malformed: size %d for %d bytes", size, len(hf)-8)
			}
			if !bytes.Contains(hf, []byte(transport.UnreadableHeaders)) || !bytes.Contains(hf, []byte(tc.want)) {
				t.Fatalf("the rewritten frame does not carry %s with %q: %q", transport.UnreadableHeaders, tc.want, hf)
			}
			if !bytes.Contains(hf, []byte("application/json")) || hf[len(hf)-2] != 2 {
				t.Fatal("the properties around the headers were not kept")
			}
			// The replacement itself reads.
			if again := guardHeaderFrame(hf); !bytes.Equal(again, hf) {
				t.Fatal("the replacement is not readable itself")
			}
		})
	}
}

func FuzzCheckTable(f *testing.F) {
	f.Add(nested(3))
	f.Add(wide(5))
	f.Add([]byte{1, 'a', 'A', 0, 0, 0, 2, 'F', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = checkTable(b, 0)
		frame := headerFrame(b)
		out := guardHeaderFrame(frame)
		if checkTable(b, 0) == nil && !bytes.Equal(out, frame) {
			t.Fatal("a readable table was rewritten")
		}
	})
}

package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"

	"github.com/acemq/acemq/transport"
)

// amqp091-go refuses to read a field table nested deeper than MaxDepth
// levels or holding more than MaxEntries entries, or one it cannot parse,
// and a refusal in a content header frame fails the whole connection. The
// broker then delivers the same message again on the next connection,
// which fails the same way: one hostile producer wedges every consumer of
// the queue.
//
// frameGuard sits between the socket and amqp091's reader. It passes every
// frame through untouched except a content header whose headers table
// amqp091 would refuse; that table is replaced by a single header,
// transport.UnreadableHeaders, saying why, and the engine parks the
// message. Body frames are streamed through without a copy.
const (
	guardMaxDepth    = MaxDepth   // amqp091's maxFieldDepth
	guardMaxElements = MaxEntries // amqp091's maxContainerElements
)

const (
	frameHeader = 2    // AMQP frame type of a content header
	frameEnd    = 0xCE // the octet that ends every frame
	flagHeaders = 0x2000
)

type frameGuard struct {
	net.Conn
	r      *bufio.Reader
	out    []byte // a rewritten or buffered frame still to hand out
	stream int    // bytes of the current frame to pass straight through
	broken bool   // not AMQP frames (a protocol refusal): pass everything
}

// NewGuard returns c with the frame guard on its reads: what amqp091-go
// reads through it is the broker's stream with every headers table it
// could not read replaced by one that says why. Writes, Close and the rest
// go to c.
func NewGuard(c net.Conn) net.Conn {
	return newFrameGuard(c)
}

func newFrameGuard(c net.Conn) *frameGuard {
	return &frameGuard{Conn: c, r: bufio.NewReaderSize(c, 64<<10)}
}

// Read hands out the broker's bytes, frame by frame.
func (g *frameGuard) Read(p []byte) (int, error) {
	if len(g.out) > 0 {
		n := copy(p, g.out)
		g.out = g.out[n:]
		return n, nil
	}
	if g.broken {
		return g.r.Read(p)
	}
	if g.stream > 0 {
		n, err := g.r.Read(p[:min(len(p), g.stream)])
		g.stream -= n
		return n, err
	}
	hdr, err := g.r.Peek(7)
	if err != nil {
		if len(hdr) > 0 {
			// A short tail (the connection is ending): let amqp091 see it.
			n, _ := g.r.Read(p)
			return n, err
		}
		return 0, err
	}
	size := binary.BigEndian.Uint32(hdr[3:7])
	switch {
	case hdr[0] < 1 || hdr[0] > 8:
		g.broken = true // "AMQP" and a version: the broker refused ours
		return g.r.Read(p)
	case hdr[0] != frameHeader || size > 1<<24:
		g.stream = 7 + int(size) + 1
		return g.Read(p)
	}
	n := 7 + int(size) + 1
	if n <= g.r.Size() {
		// The usual case: look at the frame where it sits in the buffer
		// and stream it on untouched unless it must be rewritten.
		frame, err := g.r.Peek(n)
		if err != nil {
			return g.r.Read(p) // a short tail: let amqp091 see it
		}
		if out := guardHeaderFrame(frame); &out[0] != &frame[0] {
			g.out = out
			_, _ = g.r.Discard(n)
		} else {
			g.stream = n
		}
		return g.Read(p)
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(g.r, frame); err != nil {
		return 0, err
	}
	g.out = guardHeaderFrame(frame)
	return g.Read(p)
}

// guardHeaderFrame returns frame, or a copy whose headers table is replaced
// when amqp091 could not read it.
func guardHeaderFrame(frame []byte) []byte {
	payload := frame[7 : len(frame)-1]
	// class(2) weight(2) body size(8) flags(2)
	if len(payload) < 14 {
		return frame
	}
	flags := binary.BigEndian.Uint16(payload[12:14])
	if flags&flagHeaders == 0 {
		return frame
	}
	pos := 14
	for _, f := range []uint16{0x8000, 0x4000} { // shortstr properties before headers
		if flags&f != 0 {
			if pos >= len(payload) {
				return frame
			}
			pos += 1 + int(payload[pos])
		}
	}
	if pos+4 > len(payload) {
		return frame
	}
	tlen := int(binary.BigEndian.Uint32(payload[pos : pos+4]))
	end := pos + 4 + tlen
	if end > len(payload) || tlen > math.MaxInt32 {
		return frame
	}
	problem := checkTable(payload[pos+4:end], 0)
	if problem == nil {
		return frame
	}
	repl := encodeReplacement(fmt.Sprintf("the headers table cannot be read: %v", problem))
	np := make([]byte, 0, len(payload)-tlen+len(repl))
	np = append(np, payload[:pos]...)
	np = binary.BigEndian.AppendUint32(np, uint32(len(repl)))
	np = append(np, repl...)
	np = append(np, payload[end:]...)
	out := make([]byte, 0, 7+len(np)+1)
	out = append(out, frame[:3]...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(np)))
	out = append(out, np...)
	return append(out, frameEnd)
}

// encodeReplacement encodes the table {UnreadableHeaders: reason}.
func encodeReplacement(reason string) []byte {
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	b := []byte{byte(len(transport.UnreadableHeaders))}
	b = append(b, transport.UnreadableHeaders...)
	b = append(b, 'S')
	b = binary.BigEndian.AppendUint32(b, uint32(len(reason)))
	return append(b, reason...)
}

var errTruncated = errors.New("a field runs past the end of its table")

// errArrayOverrun is an array whose length, or one of whose fields, runs
// past the end of what holds it. amqp091 reads such an array leniently,
// stopping where its input ends; the frame is not well-formed AMQP, and
// the guard refuses it rather than guess what its producer meant.
var errArrayOverrun = errors.New("an array runs past the end of what holds it")

// checkTable reports what would make amqp091 refuse the encoded table b
// (the bytes after its length) at nesting depth.
func checkTable(b []byte, depth int) error {
	if depth > guardMaxDepth {
		return fmt.Errorf("nested deeper than %d levels", guardMaxDepth)
	}
	n := 0
	for len(b) > 0 {
		klen := int(b[0])
		if 1+klen > len(b) {
			return errTruncated
		}
		b = b[1+klen:]
		rest, err := checkField(b, depth)
		if err != nil {
			return err
		}
		b = rest
		if n++; n > guardMaxElements {
			return fmt.Errorf("a table of more than %d entries", guardMaxElements)
		}
	}
	return nil
}

// checkArray is checkTable for an array's elements.
func checkArray(b []byte, depth int) error {
	if depth > guardMaxDepth {
		return fmt.Errorf("nested deeper than %d levels", guardMaxDepth)
	}
	n := 0
	for len(b) > 0 {
		rest, err := checkField(b, depth)
		if errors.Is(err, errTruncated) {
			return errArrayOverrun
		}
		if err != nil {
			return err
		}
		b = rest
		if n++; n > guardMaxElements {
			return fmt.Errorf("an array of more than %d elements", guardMaxElements)
		}
	}
	return nil
}

// fixedSizes are the widths of the fixed-size field types amqp091 reads.
var fixedSizes = [256]int8{
	't': 1, 'b': 1, 'B': 1, 's': 2, 'u': 2, 'I': 4, 'i': 4, 'l': 8,
	'f': 4, 'd': 8, 'D': 5, 'T': 8, 'V': 0,
}

// checkField checks the field at the head of b (its type octet first) and
// returns what follows it.
func checkField(b []byte, depth int) ([]byte, error) {
	if len(b) == 0 {
		return nil, errTruncated
	}
	typ, b := b[0], b[1:]
	switch typ {
	case 'S', 'x', 'A', 'F':
		if len(b) < 4 {
			return nil, errTruncated
		}
		l := binary.BigEndian.Uint32(b)
		if l > math.MaxInt32 || int(l) > len(b)-4 {
			if typ == 'A' {
				return nil, errArrayOverrun
			}
			return nil, errTruncated
		}
		body, rest := b[4:4+int(l)], b[4+int(l):]
		switch typ {
		case 'A':
			if err := checkArray(body, depth+1); err != nil {
				return nil, err
			}
		case 'F':
			if err := checkTable(body, depth+1); err != nil {
				return nil, err
			}
		}
		return rest, nil
	}
	size := fixedSizes[typ]
	if size == 0 && typ != 'V' {
		return nil, fmt.Errorf("a field of unknown type %q", typ)
	}
	if int(size) > len(b) {
		return nil, errTruncated
	}
	return b[size:], nil
}

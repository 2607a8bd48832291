package hardtest_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// loginProxy forwards AMQP connections to a broker, rewriting the password
// of the PLAIN login on the way: the client under test can then connect
// with a URL holding a secret the broker does not know (the broker sees
// its own guest account). Stop cuts every connection and stops listening,
// so the client's reconnections fail.
type loginProxy struct {
	upstream string
	addr     string
	from, to string // the PLAIN response rewritten from, to
	mu       sync.Mutex
	ln       net.Listener
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

func newLoginProxy(t testing.TB, upstream, from, to string) *loginProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &loginProxy{upstream: upstream, addr: ln.Addr().String(), from: from, to: to, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(func() { p.accept(ln) })
	t.Cleanup(p.stop)
	return p
}

func (p *loginProxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() {
			defer up.Close()
			defer c.Close()
			if err := p.rewriteLogin(c, up); err != nil {
				return
			}
			_, _ = io.Copy(up, c)
		})
		p.wg.Go(func() {
			defer c.Close()
			_, _ = io.Copy(c, up)
		})
	}
}

// rewriteLogin copies the protocol header and the client's first frame,
// connection.start-ok, replacing the PLAIN response from → to.
func (p *loginProxy) rewriteLogin(c, up net.Conn) error {
	var proto [8]byte
	if _, err := io.ReadFull(c, proto[:]); err != nil {
		return err
	}
	if _, err := up.Write(proto[:]); err != nil {
		return err
	}
	var hdr [7]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return err
	}
	payload := make([]byte, binary.BigEndian.Uint32(hdr[3:7])+1) // + frame end
	if _, err := io.ReadFull(c, payload); err != nil {
		return err
	}
	// class, method, client-properties (long length), mechanism (short
	// string), response (long string), locale.
	i := 4
	i += 4 + int(binary.BigEndian.Uint32(payload[i:]))
	i += 1 + int(payload[i])
	n := int(binary.BigEndian.Uint32(payload[i:]))
	resp := payload[i+4 : i+4+n]
	if !bytes.Equal(resp, []byte(p.from)) {
		return errors.New("unexpected login")
	}
	var out bytes.Buffer
	out.Write(payload[:i])
	_ = binary.Write(&out, binary.BigEndian, uint32(len(p.to)))
	out.WriteString(p.to)
	out.Write(payload[i+4+n:])
	binary.BigEndian.PutUint32(hdr[3:7], uint32(out.Len()-1))
	if _, err := up.Write(hdr[:]); err != nil {
		return err
	}
	_, err := up.Write(out.Bytes())
	return err
}

// stop closes the listener and every connection; it is idempotent.
func (p *loginProxy) stop() {
	p.mu.Lock()
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.wg.Wait()
}

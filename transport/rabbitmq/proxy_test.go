package rabbitmq_test

import (
	"io"
	"net"
	"sync"
	"testing"
)

// proxy forwards TCP connections to a broker and can cut them, refuse new
// ones, or freeze the broker-to-client direction: outages that touch only
// the transport under test, not the broker other tests share.
type proxy struct {
	t        testing.TB
	upstream string
	addr     string

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	frozen chan struct{} // non-nil while broker-to-client bytes are held
	wg     sync.WaitGroup
}

func newProxy(t testing.TB, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, upstream: upstream, addr: ln.Addr().String(), conns: make(map[net.Conn]struct{})}
	p.serve(ln)
	t.Cleanup(func() {
		p.thaw()
		p.stop()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
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
			p.wg.Add(2)
			go p.pipe(up, c, false)
			go p.pipe(c, up, true)
		}
	}()
}

// pipe copies from src to dst; downstream copies wait while frozen.
func (p *proxy) pipe(dst, src net.Conn, downstream bool) {
	defer p.wg.Done()
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && downstream {
			p.mu.Lock()
			f := p.frozen
			p.mu.Unlock()
			if f != nil {
				<-f
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// cut closes every forwarded connection; new ones are still accepted.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// stop refuses new connections and cuts the current ones.
func (p *proxy) stop() {
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.mu.Unlock()
	p.cut()
}

// start accepts connections again on the same address.
func (p *proxy) start() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// freeze holds everything the broker sends until thaw.
func (p *proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == nil {
		p.frozen = make(chan struct{})
	}
}

func (p *proxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

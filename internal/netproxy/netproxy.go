// Package netproxy is a TCP proxy for tests that put the network between a
// client and a broker at fault without touching the broker, which other
// tests may share: Pause stops forwarding while leaving every connection
// open (what a partition or a frozen peer looks like from either end: silence,
// not a close), Resume lets the held bytes through, Cut closes the
// forwarded connections as a failed link would.
package netproxy

import (
	"errors"
	"net"
	"sync"
)

// Proxy forwards every connection made to Addr to its upstream address.
// Its methods are safe for concurrent use.
type Proxy struct {
	upstream string
	ln       net.Listener
	done     chan struct{} // closed by Close

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	paused chan struct{} // non-nil while paused; closed by Resume
	closed bool

	wg sync.WaitGroup
}

// New listens on a free port of 127.0.0.1 and forwards what it accepts to
// upstream (host:port). Close it when done.
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{upstream: upstream, ln: ln, done: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			return
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst, holding each read while the proxy is paused.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer p.forget(dst, src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// gate waits while the proxy is paused; it reports false once it closed.
func (p *Proxy) gate() bool {
	p.mu.Lock()
	g := p.paused
	p.mu.Unlock()
	if g == nil {
		return true
	}
	select {
	case <-g:
		return true
	case <-p.done:
		return false
	}
}

func (p *Proxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// Pause stops forwarding in both directions: what either side sends is
// held, and no connection is closed. New connections are accepted and held
// the same way.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == nil {
		p.paused = make(chan struct{})
	}
}

// Resume forwards again, the held bytes first.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
}

// Cut closes every forwarded connection, on both sides; new connections
// are still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

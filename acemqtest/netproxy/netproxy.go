// Package netproxy puts a TCP proxy between a client and its broker so a
// test can break the network without touching the broker, which other tests
// may share. A service's tests use it to see what their code does when the
// link to RabbitMQ fails; acemq's own transport and fault tests use it the
// same way.
//
// Pause holds the bytes in both directions and keeps every connection
// open: from either end, a partition or a frozen peer, silence and not a
// close. PauseDownstream holds only what the broker sends. Resume lets the
// held bytes through. Cut closes the forwarded connections, as a failed
// link does. Stop refuses new connections and Start takes them again on
// the same address, as a node that goes down and comes back. The package
// uses the standard library only.
package netproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// Proxy forwards every connection made to Addr to its upstream address.
// Its methods are safe for concurrent use.
type Proxy struct {
	upstream string
	addr     string
	done     chan struct{} // closed by Close

	mu     sync.Mutex
	ln     net.Listener // nil while stopped
	conns  map[net.Conn]struct{}
	paused chan struct{} // non-nil while both directions are held; closed by Resume
	down   chan struct{} // non-nil while the upstream's bytes are held; closed by Resume
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
	p := &Proxy{upstream: upstream, addr: ln.Addr().String(), done: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	p.serve(ln)
	return p, nil
}

// Addr is the address clients connect to; it stays the same across Stop
// and Start.
func (p *Proxy) Addr() string { return p.addr }

// serve accepts on ln until it is closed.
func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.wg.Add(1)
	p.mu.Unlock()
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
			if p.closed {
				p.mu.Unlock()
				_ = c.Close()
				_ = up.Close()
				return
			}
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.wg.Add(2)
			p.mu.Unlock()
			go p.pipe(up, c, false)
			go p.pipe(c, up, true)
		}
	}()
}

// pipe copies src to dst, holding each read while the proxy is paused;
// downstream is the upstream-to-client direction.
func (p *Proxy) pipe(dst, src net.Conn, downstream bool) {
	defer p.wg.Done()
	defer p.forget(dst, src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate(downstream) {
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

// gate waits while the proxy holds this direction; it reports false once
// the proxy closed.
func (p *Proxy) gate(downstream bool) bool {
	for {
		p.mu.Lock()
		g := p.paused
		if g == nil && downstream {
			g = p.down
		}
		p.mu.Unlock()
		if g == nil {
			return true
		}
		select {
		case <-g:
		case <-p.done:
			return false
		}
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

// PauseDownstream holds what the upstream sends, until Resume, and
// forwards what clients send: a peer that has gone silent while its
// socket still takes bytes.
func (p *Proxy) PauseDownstream() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down == nil {
		p.down = make(chan struct{})
	}
}

// Resume forwards again, the held bytes first.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range []*chan struct{}{&p.paused, &p.down} {
		if *g != nil {
			close(*g)
			*g = nil
		}
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

// Stop refuses new connections (nothing listens on Addr) and cuts the
// current ones, until Start.
func (p *Proxy) Stop() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	p.Cut()
}

// Start takes connections on Addr again after Stop; it does nothing while
// the proxy is listening.
func (p *Proxy) Start() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("netproxy: Start after Close")
	}
	listening := p.ln != nil
	p.mu.Unlock()
	if listening {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("netproxy: listening again on %s: %w", p.addr, err)
	}
	p.serve(ln)
	return nil
}

// Close stops accepting, closes every connection, lets held bytes go and
// waits for the proxy's goroutines to end. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	var err error
	if ln != nil {
		err = ln.Close()
	}
	p.Cut()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

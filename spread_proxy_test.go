package acemq_test

import (
	"net"
	neturl "net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// spreadProxy forwards TCP connections to RabbitMQ and can cut them (a
// connection killed) or freeze them and refuse new ones (a peer gone
// silent, found only by heartbeats), touching only the instance behind it.
type spreadProxy struct {
	t        *testing.T
	url      string // the broker's URL through the proxy
	upstream string
	ln       net.Listener
	wg       sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	thawed chan struct{} // closed unless frozen
}

func newSpreadProxy(t *testing.T, brokerURL string) *spreadProxy {
	t.Helper()
	u, err := neturl.Parse(brokerURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &spreadProxy{t: t, upstream: u.Host, ln: ln, conns: map[net.Conn]struct{}{}, thawed: make(chan struct{})}
	close(p.thawed)
	u.Host = ln.Addr().String()
	p.url = u.String()
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.thaw()
		p.wg.Wait()
	})
	return p
}

func (p *spreadProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		frozen := p.isFrozenLocked()
		p.mu.Unlock()
		if frozen {
			_ = c.Close()
			continue
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
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

func (p *spreadProxy) isFrozenLocked() bool {
	select {
	case <-p.thawed:
		return false
	default:
		return true
	}
}

// pipe copies src to dst, holding the bytes while the proxy is frozen.
func (p *spreadProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			thawed := p.thawed
			p.mu.Unlock()
			<-thawed
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// cut closes every connection through the proxy; new ones are let through.
func (p *spreadProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// freeze holds every byte in flight and refuses new connections.
func (p *spreadProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.isFrozenLocked() {
		p.thawed = make(chan struct{})
	}
}

// thaw cuts the frozen connections (their peers gave up on them) and lets
// new ones through.
func (p *spreadProxy) thaw() {
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	if p.isFrozenLocked() {
		close(p.thawed)
	}
	p.mu.Unlock()
}

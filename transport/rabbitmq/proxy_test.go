package rabbitmq_test

import (
	"testing"

	"github.com/acemq/acemq/acemqtest/netproxy"
)

// proxy forwards TCP connections to a broker (acemqtest/netproxy) and can
// cut them, refuse new ones, or freeze the broker-to-client direction:
// outages that touch only the transport under test, not the broker other
// tests share. It closes when the test ends.
type proxy struct {
	t    testing.TB
	p    *netproxy.Proxy
	addr string
}

func newProxy(t testing.TB, upstream string) *proxy {
	t.Helper()
	p, err := netproxy.New(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &proxy{t: t, p: p, addr: p.Addr()}
}

// cut closes every forwarded connection; new ones are still accepted.
func (p *proxy) cut() { p.p.Cut() }

// stop refuses new connections and cuts the current ones.
func (p *proxy) stop() { p.p.Stop() }

// start accepts connections again on the same address.
func (p *proxy) start() {
	p.t.Helper()
	if err := p.p.Start(); err != nil {
		p.t.Fatal(err)
	}
}

// freeze holds everything the broker sends until thaw.
func (p *proxy) freeze() { p.p.PauseDownstream() }

func (p *proxy) thaw() { p.p.Resume() }

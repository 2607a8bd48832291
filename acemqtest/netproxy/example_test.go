package netproxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"

	"github.com/acemq/acemq/acemqtest/netproxy"
)

// A client reaches a server through the proxy until the test cuts the
// link; the next connection goes through again. In a service's test the
// upstream is the broker's host:port and the client connects to the URL
// with p.Addr() as its host.
func Example() {
	// The upstream: a server that echoes every line it is sent.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
			}()
		}
	}()

	p, err := netproxy.New(ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = p.Close() }()

	ask := func(c net.Conn, r *bufio.Reader) string {
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			return "link closed"
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return "link closed"
		}
		return line[:len(line)-1]
	}

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		fmt.Println(err)
		return
	}
	r := bufio.NewReader(c)
	fmt.Println("through the proxy:", ask(c, r))
	p.Cut()
	fmt.Println("after Cut:", ask(c, r))
	_ = c.Close()

	c, err = net.Dial("tcp", p.Addr())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = c.Close() }()
	fmt.Println("a new connection:", ask(c, bufio.NewReader(c)))
	// Output:
	// through the proxy: ping
	// after Cut: link closed
	// a new connection: ping
}

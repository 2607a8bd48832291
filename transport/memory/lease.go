package memory

import (
	"context"
	"fmt"
	"strings"

	"github.com/acemq/acemq/transport"
)

var (
	_ transport.Leaser           = (*Transport)(nil)
	_ transport.HandOverConsumer = (*Transport)(nil)
)

// lease is a name one client holds on its broker, as a RabbitMQ connection
// holds an exclusive queue. The broker's lock guards ended.
type lease struct {
	t     *Transport
	name  string
	lost  chan struct{} // closed when the client closes while it holds the lease
	ended bool
}

// Lease takes the lease name for this client; it implements
// transport.Leaser. It fails with an error wrapping transport.ErrLocked when
// a client holds it already, this one included (so that two parts of one
// program sharing a client cannot both hold it), or when a queue has the
// name. The lease ends with Release, or when the client closes: then Lost is
// closed, and another client may take it.
func (t *Transport) Lease(ctx context.Context, name string) (transport.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if name == "" || strings.HasPrefix(name, "amq.") {
		return nil, fmt.Errorf("memory: lease %q: a lease needs a name outside the amq. prefix", name)
	}
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.closed {
		return nil, closedError(fmt.Sprintf("lease %q", name))
	}
	if held, ok := b.leases[name]; ok {
		if held.t == t {
			return nil, errorf(transport.ErrLocked, "memory: lease %q: this client holds it already", name)
		}
		return nil, errorf(transport.ErrLocked, "memory: lease %q: another client holds it", name)
	}
	if _, ok := b.queues[name]; ok {
		return nil, errorf(transport.ErrLocked, "memory: lease %q: a queue of that name exists", name)
	}
	l := &lease{t: t, name: name, lost: make(chan struct{})}
	b.leases[name] = l
	return l, nil
}

// Lost is closed once the lease ended because its client closed.
func (l *lease) Lost() <-chan struct{} { return l.lost }

// Release gives the lease up, so that any client may take it. It is
// idempotent, and nil once the client has closed.
func (l *lease) Release(context.Context) error {
	b := l.t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	l.endLocked(false)
	return nil
}

// endLocked ends the lease, closing Lost when it was lost rather than
// released.
func (l *lease) endLocked(lost bool) {
	if l.ended {
		return
	}
	l.ended = true
	if l.t.b.leases[l.name] == l {
		delete(l.t.b.leases, l.name)
	}
	if lost {
		close(l.lost)
	}
}

// endLeasesLocked ends every lease t holds, as lost; t is closing.
func (t *Transport) endLeasesLocked() {
	for _, l := range t.b.leases {
		if l.t == t {
			l.endLocked(true)
		}
	}
}

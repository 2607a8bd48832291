package rabbitmq

import (
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq/transport"
)

var _ transport.Liveness = (*Transport)(nil)

// epoch is the instant hearing measures from; time.Time values built on
// it carry its monotonic clock reading.
var epoch = time.Now()

// hearing records when one connection's socket last read anything from
// the broker, as nanoseconds since epoch on the monotonic clock, and the
// heartbeat the connection negotiated. Only the connection's reader
// goroutine reads from the socket, so only it records.
type hearing struct {
	at        atomic.Int64
	heartbeat atomic.Int64 // time.Duration
	silent    atomic.Bool  // a read came after a silence past the timeout
}

func newHearing() *hearing {
	h := &hearing{}
	h.at.Store(int64(time.Since(epoch)))
	return h
}

// heard records a read that returned bytes. It records nothing and reports
// false when the read came longer than the connection's timeout after the
// one before (then and ever after on this connection): the process was
// frozen, or the network held the bytes back, and what arrives now may have
// been sent before the broker closed the connection as dead. amqp091 would
// take such bytes as a sign of life and carry on; the transport drops the
// connection instead, as amqp091 does itself when nothing arrives for as
// long, so that the leases end and a fresh connection is made.
func (h *hearing) heard() bool {
	if h.silent.Load() {
		return false
	}
	now := int64(time.Since(epoch))
	if to := h.timeout(); to > 0 && now-h.at.Load() > int64(to) {
		h.silent.Store(true)
		return false
	}
	h.at.Store(now)
	return true
}

func (h *hearing) last() time.Time { return epoch.Add(time.Duration(h.at.Load())) }

func (h *hearing) setHeartbeat(d time.Duration) { h.heartbeat.Store(int64(d)) }

// timeout is 1.5 heartbeats (see Transport.Timeout), zero without one.
func (h *hearing) timeout() time.Duration { return 3 * time.Duration(h.heartbeat.Load()) / 2 }

// wrap returns c recording each read that returns bytes.
func (h *hearing) wrap(c net.Conn) net.Conn { return &heardConn{Conn: c, h: h} }

// heardConn is a net.Conn whose reads are recorded: the raw socket under
// TLS and the frame guard, so that any byte from the broker counts.
type heardConn struct {
	net.Conn
	h *hearing
}

// errSilent ends a connection whose broker was silent past the timeout.
var errSilent = errors.New("nothing was heard from the broker for longer than the heartbeat timeout (the process was frozen or the network held the bytes back): the connection is taken as dead")

func (c *heardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.h.heard() {
		return 0, errSilent
	}
	return n, err
}

// LastHeard is when the socket of the transport's current connection last
// read anything from the broker (a frame of any kind: heartbeats, which an
// idle broker sends every half heartbeat interval, included), or of the
// last connection while the transport is down and reconnecting. Bytes that
// arrive after a silence longer than Timeout do not count: the transport
// drops that connection and makes another. It implements
// transport.Liveness; the value carries a monotonic clock
// reading, so time.Since(LastHeard()) keeps growing through a freeze of
// the process and is not moved by changes of the wall clock.
func (t *Transport) LastHeard() time.Time {
	h := t.heard.Load()
	if h == nil {
		return time.Time{}
	}
	return h.last()
}

// Timeout is one and a half times the heartbeat interval the current (or
// last) connection negotiated: the soonest RabbitMQ may close a connection
// it stopped hearing from. The broker checks every interval and closes a
// connection silent for two checks in a row, so 2 to 3 intervals after the
// last byte it received (measured: 28 s with the default 10 s); the client
// sends a heartbeat when it has sent nothing for half an interval, so its
// last byte may reach the broker half an interval before the last byte it
// read: 2 - 1/2. amqp091 gives up a connection it has read nothing from for
// the same 1.5 intervals. A client that has heard nothing for Timeout must
// take its leases and subscriptions as gone, whether or not the broker or
// the transport has said so yet. It is zero when the broker and the client
// agreed on no heartbeat.
func (t *Transport) Timeout() time.Duration {
	h := t.heard.Load()
	if h == nil {
		return 0
	}
	return h.timeout()
}

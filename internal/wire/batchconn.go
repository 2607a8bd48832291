package wire

import (
	"net"
	"sync"
)

// maxPending bounds the bytes a batchConn holds for the socket. A writer
// that would go past it waits, so TCP back-pressure from the broker still
// reaches the publishers (RabbitMQ stops reading a blocked connection).
const maxPending = 1 << 20

// batchConn coalesces the writes amqp091 makes into fewer, larger socket
// writes. amqp091 flushes its buffer once per publish, which costs a write
// system call per message on the client and a read and a TCP segment per
// message on the broker; pipelined publishes leave many of those in a row.
//
// Write copies into a pending buffer and returns; one flusher goroutine,
// started when bytes arrive and none runs, writes everything pending in one
// call and goes on while more arrives, then ends. An idle connection
// therefore has no flusher and a lone publish waits only for the hand-off.
// A socket error is sticky: it fails every later Write, which amqp091 turns
// into a connection loss. Close closes the socket and waits for the flusher.
type batchConn struct {
	net.Conn

	mu       sync.Mutex
	drained  sync.Cond // signalled when pending shrinks or the flusher ends
	pending  []byte    // written by amqp091, not yet on the socket
	spare    []byte    // the buffer the flusher last wrote, reused
	flushing bool      // a flusher goroutine runs
	err      error     // the first socket error, or net.ErrClosed after Close
}

// NewBatchConn returns c with its writes coalesced (see batchConn). Its
// Write returns once the bytes are queued, not once they are on the
// socket: an error writing them shows at a later Write or at Close, and
// only a publisher confirm says the broker has a message. Close must be
// called; it ends the flusher goroutine and waits for it.
func NewBatchConn(c net.Conn) net.Conn {
	return newBatchConn(c)
}

func newBatchConn(c net.Conn) *batchConn {
	b := &batchConn{Conn: c}
	b.drained.L = &b.mu
	return b
}

// Write queues p for the socket. It waits while maxPending bytes are
// pending, and fails once the socket has failed or the conn is closed.
func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	for b.err == nil && len(b.pending) > 0 && len(b.pending)+len(p) > maxPending {
		b.drained.Wait()
	}
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	b.pending = append(b.pending, p...)
	if !b.flushing {
		b.flushing = true
		go b.flush()
	}
	b.mu.Unlock()
	return len(p), nil
}

// flush writes what is pending until nothing is, or the socket fails.
func (b *batchConn) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.pending) > 0 && b.err == nil {
		buf := b.pending
		b.pending, b.spare = b.spare[:0], nil // pending owns the spare now
		b.mu.Unlock()
		_, err := b.Conn.Write(buf)
		b.mu.Lock()
		if cap(buf) <= 4*maxPending {
			b.spare = buf[:0]
		}
		if err != nil && b.err == nil {
			b.err = err
		}
		b.drained.Broadcast()
	}
	b.flushing = false
	b.drained.Broadcast()
}

// Close closes the socket, which also ends a flusher stuck on it, and
// waits for the flusher to end.
func (b *batchConn) Close() error {
	err := b.Conn.Close()
	b.mu.Lock()
	if b.err == nil {
		b.err = net.ErrClosed
	}
	for b.flushing {
		b.drained.Wait()
	}
	b.pending, b.spare = nil, nil
	b.mu.Unlock()
	return err
}

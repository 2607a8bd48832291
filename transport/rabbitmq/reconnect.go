package rabbitmq

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// session is one AMQP connection's lifetime. Everything opened on it
// (channels, consumers, delivery tags) dies with it; done tells when.
type session struct {
	conn   *amqp.Connection
	gen    uint64
	done   chan struct{}
	closes chan *amqp.Error
	blocks chan amqp.Blocking

	mu           sync.Mutex
	unblocked    chan struct{} // non-nil while the broker blocks publishing
	blockedSince time.Time
	blockReason  string
}

// blockedWait returns a channel closed when the broker lifts its block, or
// nil when publishing is not blocked.
func (s *session) blockedWait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unblocked == nil {
		return nil
	}
	return s.unblocked
}

func (s *session) setBlocked(b amqp.Blocking) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case b.Active && s.unblocked == nil:
		s.unblocked = make(chan struct{})
		s.blockedSince = time.Now()
		s.blockReason = b.Reason
	case !b.Active && s.unblocked != nil:
		close(s.unblocked)
		s.unblocked = nil
	}
}

// downState is what Health reports while the connection is down.
type downState struct {
	since    time.Time
	attempts int
	err      error
}

// connect dials and prepares a session: the topology declared so far is
// declared again before anyone may publish or consume on it.
func (t *Transport) connect(ctx context.Context) (*session, error) {
	conn, err := t.dial(ctx)
	if err != nil {
		return nil, err
	}
	s := &session{
		conn:   conn,
		done:   make(chan struct{}),
		closes: conn.NotifyClose(make(chan *amqp.Error, 1)),
		blocks: conn.NotifyBlocked(make(chan amqp.Blocking, 4)),
	}
	t.mu.Lock()
	t.gen++
	s.gen = t.gen
	t.mu.Unlock()
	if err := t.redeclare(ctx, s); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return s, nil
}

// setUp publishes s as the live session and wakes everyone waiting for it.
func (t *Transport) setUp(s *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sess = s
	t.down = downState{}
	close(t.up)
}

// setDown records the loss of the live session.
func (t *Transport) setDown(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sess = nil
	t.up = make(chan struct{})
	t.down = downState{since: time.Now(), err: t.scrub(err)}
}

// supervise owns the connection: it watches the live session, and when it
// dies reconnects with capped exponential backoff until it succeeds or the
// transport closes. It never gives up on its own.
func (t *Transport) supervise(s *session) {
	defer t.wg.Done()
	for {
		err := t.watch(s)
		if t.isClosed() {
			return
		}
		if err == nil {
			err = errConnectionLost
		}
		t.setDown(err)
		t.log.Warn("acemq: rabbitmq connection lost", "url", t.safeURL, "err", t.scrub(err))
		if s = t.reconnect(); s == nil {
			return
		}
		t.setUp(s)
		t.log.Info("acemq: rabbitmq reconnected", "url", t.safeURL, "generation", s.gen)
	}
}

type lostError struct{}

func (lostError) Error() string { return "the connection closed" }

var errConnectionLost error = lostError{}

// watch blocks until s dies or the transport closes, tracking the broker's
// connection.blocked notifications meanwhile. It returns why s died.
func (t *Transport) watch(s *session) error {
	defer close(s.done)
	defer s.setBlocked(amqp.Blocking{Active: false})
	blocks := s.blocks
	for {
		select {
		case e, ok := <-s.closes:
			if ok && e != nil {
				return e
			}
			return nil
		case b, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			s.setBlocked(b)
			if b.Active {
				t.log.Warn("acemq: rabbitmq blocked publishing", "url", t.safeURL, "reason", b.Reason)
			}
		case <-t.closing:
			_ = s.conn.CloseDeadline(time.Now().Add(2 * time.Second))
			return nil
		}
	}
}

// reconnect dials until it has a session or the transport closes (nil).
func (t *Transport) reconnect() *session {
	for attempt := 0; ; attempt++ {
		if !t.sleep(t.backoff(attempt)) {
			return nil
		}
		ctx, cancel := context.WithTimeout(t.stopCtx, 30*time.Second)
		s, err := t.connect(ctx)
		cancel()
		if err == nil {
			if t.isClosed() {
				_ = s.conn.Close()
				return nil
			}
			return s
		}
		t.mu.Lock()
		t.down.attempts++
		t.down.err = err
		t.mu.Unlock()
		t.log.Warn("acemq: rabbitmq reconnection failed", "url", t.safeURL, "attempt", attempt+1, "err", err)
	}
}

// backoff is the pause before attempt n (from 0): MinBackoff doubled n
// times, capped at MaxBackoff, of which a random half is jitter.
func (t *Transport) backoff(n int) time.Duration {
	d := t.cfg.MinBackoff
	for i := 0; i < n && d < t.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, t.cfg.MaxBackoff)
	half := d / 2
	return half + rand.N(half+1)
}

// sleep pauses for d, reporting false when the transport closed meanwhile.
func (t *Transport) sleep(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.closing:
		return false
	}
}

// current returns the live session, waiting for one up to ctx.
func (t *Transport) current(ctx context.Context, op string) (*session, error) {
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, errClosed(op)
		}
		if t.sess != nil {
			s := t.sess
			t.mu.Unlock()
			return s, nil
		}
		up := t.up
		t.mu.Unlock()
		select {
		case <-up:
		case <-t.closing:
		case <-ctx.Done():
			return nil, ctxError(op+" waiting for the connection", ctx)
		}
	}
}

package rabbitmq

import (
	"context"
	"fmt"
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
	node   int // index in Transport.nodes
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
	from     int // the node that was lost
	attempts int
	err      error // the last attempt's, or the loss's
}

// connect dials node i and prepares a session: the topology declared so
// far is declared again before anyone may publish or consume on it.
func (t *Transport) connect(ctx context.Context, i int) (*session, error) {
	conn, heard, err := t.dialHeard(ctx, i)
	if err != nil {
		return nil, err
	}
	s := &session{
		conn:   conn,
		node:   i,
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
		return nil, &nodeError{node: t.nodes[i].safe, err: err}
	}
	t.heard.Store(heard)
	return s, nil
}

// connectFirst makes Dial's connection: rounds over the nodes, starting at
// a random one, with backoff between rounds, until a node accepts, an
// attempt meets what no retry fixes, or ctx ends.
//
// The random start spreads the connections of a service's replicas over
// the cluster, so that no single node carries them all and the loss of
// one node moves only its share; every node of a cluster serves every
// queue, so nothing is gained by preferring the first.
func (t *Transport) connectFirst(ctx context.Context) (*session, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxError("connect", ctx)
	}
	start := rand.N(len(t.nodes))
	attempts := 0
	var last error
	for round := 0; ; round++ {
		for k := range t.nodes {
			s, err := t.connect(ctx, (start+k)%len(t.nodes))
			if err == nil {
				return s, nil
			}
			attempts++
			if why, ok := permanent(err); ok {
				return nil, fmt.Errorf("rabbitmq: connect: %s: %w", why, err)
			}
			t.log.Debug("acemq: rabbitmq connection attempt failed", "attempt", attempts, "error", err)
			if ctx.Err() != nil || pastDeadline(ctx) {
				// Cut short by ctx (a dial bounded by ctx's deadline may
				// time out a moment before ctx reports it): what the attempt
				// before it met says more.
				if last == nil {
					last = err
				}
				break
			}
			last = err
		}
		if ctx.Err() == nil {
			timer := time.NewTimer(t.backoff(round))
			select {
			case <-timer.C:
				continue
			case <-ctx.Done():
				timer.Stop()
			}
		}
		return nil, fmt.Errorf("rabbitmq: connect: %w after %s; the last attempt met: %w",
			ctx.Err(), plural(attempts, "attempt"), last)
	}
}

// setUp publishes s as the live session and wakes everyone waiting for it.
func (t *Transport) setUp(s *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sess = s
	t.down = downState{}
	close(t.up)
}

// setDown records the loss of the live session, which was on node from.
func (t *Transport) setDown(from int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sess = nil
	t.up = make(chan struct{})
	t.down = downState{since: time.Now(), from: from, err: t.scrub(err)}
}

// supervise owns the connection: it watches the live session, and when it
// dies moves to the next node that accepts a connection (see reconnect)
// until it succeeds or the transport closes. It never gives up on its own.
//
// A connection that dies soon after it opened, again and again (a delivery
// the broker sends on it that the client cannot take, say), is not tried
// again at once each time: each short-lived session in a row starts the
// next reconnect one backoff round further, so the pauses grow to
// MaxBackoff as they do for a node that refuses.
func (t *Transport) supervise(s *session) {
	defer t.wg.Done()
	flaps := 0
	for {
		opened := time.Now()
		err := t.watch(s)
		t.endLeases(s)
		if t.isClosed() {
			return
		}
		if err == nil {
			err = errConnectionLost
		}
		t.setDown(s.node, err)
		if time.Since(opened) < flapWindow {
			flaps++
		} else {
			flaps = 0
		}
		if flaps > 0 {
			t.log.Warn("acemq: rabbitmq connection lost soon after it opened; reconnecting with a longer pause",
				"node", t.nodes[s.node].safe, "in_a_row", flaps, "lived", time.Since(opened).Round(time.Millisecond), "error", t.scrub(err))
		} else {
			t.log.Warn("acemq: rabbitmq connection lost", "node", t.nodes[s.node].safe, "error", t.scrub(err))
		}
		from, lost := s.node, time.Now()
		if s = t.reconnect(from, flaps); s == nil {
			return
		}
		t.setUp(s)
		t.log.Info("acemq: rabbitmq reconnected", "from", t.nodes[from].safe, "to", t.nodes[s.node].safe,
			"outage", time.Since(lost).Round(time.Millisecond), "generation", s.gen)
	}
}

// flapWindow is how long a connection must live for its loss to count as
// an outage rather than one more failure of a connection that keeps dying
// soon after it opens.
const flapWindow = 5 * time.Second

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
				t.log.Warn("acemq: rabbitmq blocked publishing", "node", t.nodes[s.node].safe, "reason", b.Reason)
			}
		case <-t.closing:
			_ = s.conn.CloseDeadline(time.Now().Add(2 * time.Second))
			return nil
		}
	}
}

// reconnect finds a node after the loss of node from, or returns nil when
// the transport closes. It goes round the list starting with the node after
// from (so a lost node is tried last, and a lone node again), pausing
// MinBackoff doubled per failed round, capped at MaxBackoff, between full
// rounds. It never gives up: even a refused login is tried again, since an
// operator may fix it while the service runs.
//
// It starts at round first: 0 after a connection that lived, more after
// connections that died soon after opening (see supervise).
func (t *Transport) reconnect(from, first int) *session {
	n := len(t.nodes)
	for round := first; ; round++ {
		if !t.sleep(t.backoff(round)) {
			return nil
		}
		var last error
		for k := 1; k <= n; k++ {
			ctx, cancel := context.WithTimeout(t.stopCtx, 3*t.cfg.DialTimeout)
			s, err := t.connect(ctx, (from+k)%n)
			cancel()
			if err == nil {
				if t.isClosed() {
					_ = s.conn.Close()
					return nil
				}
				return s
			}
			if t.isClosed() {
				return nil
			}
			last = err
			t.mu.Lock()
			t.down.attempts++
			t.down.err = err
			t.mu.Unlock()
			t.log.Debug("acemq: rabbitmq connection attempt failed", "error", err)
		}
		t.log.Warn("acemq: rabbitmq no node accepted a connection", "round", round+1,
			"nodes", n, "error", last)
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

// pastDeadline reports whether ctx's deadline has passed, whether or not
// ctx has noticed yet.
func pastDeadline(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/tools/cluster"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// Order is what the load sends.
type Order struct {
	ID string `json:"id"`
	N  int    `json:"n"`
}

// syncBuffer collects a Conn's log lines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// load is 8 goroutines Sending to one queue while a consumer of the same
// Conn handles it, recording what was confirmed and what was handled.
type load struct {
	t    *testing.T
	c    *acemq.Conn
	q    string
	logs *syncBuffer

	stop   chan struct{}
	wg     sync.WaitGroup
	runCtx context.Context
	cancel context.CancelFunc
	runErr chan error

	sent, failed atomic.Int64

	mu        sync.Mutex
	confirmed map[string]sendTimes // ID → when its Send started and returned nil
	handled   map[string]int       // ID → times the handler saw it
	sendErrs  map[string]int       // a failed Send's error, its variable parts cut → count
	lastErr   error
}

// sendTimes is when a confirmed Send was called and when it returned.
type sendTimes struct{ start, end time.Time }

// loadConfig shapes a load.
type loadConfig struct {
	classic bool          // a classic queue rather than quorum queues
	senders int           // 0 means 8
	home    *cluster.Node // declare the queues through this node first, so their leader or home is there
	avoid   *cluster.Node // leave this node out of the Conn's URL list
}

// startLoad connects to the whole cluster and starts senders and consumer.
func startLoad(t *testing.T, cl *cluster.Cluster, cfg loadConfig) *load {
	t.Helper()
	if cfg.senders == 0 {
		cfg.senders = 8
	}
	logs := &syncBuffer{}
	opts := []acemq.ConnOption{acemq.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))}
	if !cfg.classic {
		opts = append(opts, acemq.WithQuorumQueues())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := acemqtest.QueueName(t, "cluster")
	acemqtest.DeleteQueuesAfter(t, cl.URLs(), q)
	noop := func(context.Context, *acemq.Message[Order]) acemq.Ack { return acemq.Done() }
	if cfg.home != nil {
		hc, err := acemq.Connect(ctx, cfg.home.URL(), opts...)
		if err != nil {
			t.Fatalf("Connect to %s: %v", cfg.home.Name, err)
		}
		_, err = acemq.NewConsumer(hc, q, noop)
		_ = hc.Close()
		if err != nil {
			t.Fatalf("declaring on %s: %v", cfg.home.Name, err)
		}
	}
	list := cl.URLs()
	if cfg.avoid != nil {
		var keep []string
		for _, n := range cl.Nodes {
			if n != cfg.avoid {
				keep = append(keep, n.URL())
			}
		}
		list = strings.Join(keep, ",")
	}
	c, err := acemq.Connect(ctx, list, opts...)
	if err != nil {
		t.Fatalf("Connect to %s: %v", acemq.Redact(list), err)
	}
	l := &load{
		t: t, c: c, q: q, logs: logs,
		stop: make(chan struct{}), runErr: make(chan error, 1),
		confirmed: map[string]sendTimes{}, handled: map[string]int{},
		sendErrs: map[string]int{},
	}
	t.Cleanup(func() { _ = c.Close() })
	cons, err := acemq.NewConsumer(c, l.q, func(_ context.Context, m *acemq.Message[Order]) acemq.Ack {
		l.mu.Lock()
		l.handled[m.Envelope.ID]++
		l.mu.Unlock()
		return acemq.Done()
	}, acemq.Concurrency(4))
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	l.runCtx, l.cancel = context.WithCancel(context.Background())
	go func() { l.runErr <- cons.Run(l.runCtx) }()
	pub := acemq.NewPublisher[Order](c, "", l.q)
	for g := range cfg.senders {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				id := fmt.Sprintf("g%d-%d", g, i)
				l.sent.Add(1)
				start := time.Now()
				sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := pub.Send(sctx, Order{ID: id, N: i}, acemq.MessageID(id))
				scancel()
				if err != nil {
					l.failed.Add(1)
					l.mu.Lock()
					l.lastErr = err
					l.sendErrs[errKind(err)]++
					l.mu.Unlock()
					time.Sleep(50 * time.Millisecond)
					continue
				}
				l.mu.Lock()
				l.confirmed[id] = sendTimes{start: start, end: time.Now()}
				l.mu.Unlock()
			}
		})
	}
	l.waitConfirms(100, time.Minute)
	return l
}

// errKind is the last part of err's text, its cause, without the message
// ID and queue name, so that failures of one kind count together.
func errKind(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg
}

// errorsSeen lists the kinds of Send failures and their counts.
func (l *load) errorsSeen() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.sendErrs)
}

// node is the node the Conn is connected to right now.
func (l *load) node(cl *cluster.Cluster) *cluster.Node {
	l.t.Helper()
	tr, ok := l.c.Transport().(*rabbitmq.Transport)
	if !ok {
		l.t.Fatalf("the Conn's transport is %T", l.c.Transport())
	}
	var n *cluster.Node
	deadline := time.Now().Add(30 * time.Second)
	for n == nil {
		if n = cl.Node(tr.Node()); n == nil {
			if time.Now().After(deadline) {
				l.t.Fatalf("the Conn is on no node of the cluster (%q)", tr.Node())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return n
}

// confirmedCount is how many Sends have been confirmed so far.
func (l *load) confirmedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.confirmed)
}

// waitConfirms waits for n more confirms than now, for up to d.
func (l *load) waitConfirms(n int, d time.Duration) {
	l.t.Helper()
	want := l.confirmedCount() + n
	deadline := time.Now().Add(d)
	for l.confirmedCount() < want {
		if time.Now().After(deadline) {
			l.mu.Lock()
			err := l.lastErr
			l.mu.Unlock()
			l.t.Fatalf("fewer than %d more confirms in %v (last Send error: %v)\nlog:\n%s", n, d, err, l.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// resumedAfter is how long after since the first Send called after since
// was confirmed, or how long until now when none has been yet (then ok is
// false). Sends called before since may still be confirmed by a node in
// its last moments, so they do not count.
func (l *load) resumedAfter(since time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := time.Time{}
	for _, at := range l.confirmed {
		if at.start.After(since) && (first.IsZero() || at.end.Before(first)) {
			first = at.end
		}
	}
	if first.IsZero() {
		return time.Since(since), false
	}
	return first.Sub(since), true
}

// waitResumed waits until a Send started after since is confirmed and
// returns how long that took after since.
func (l *load) waitResumed(since time.Time, limit time.Duration) time.Duration {
	l.t.Helper()
	for {
		d, ok := l.resumedAfter(since)
		if ok {
			return d
		}
		if d > limit {
			l.t.Fatalf("no Send confirmed within %v of the fault\nlog:\n%s", limit, l.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// maxGap is the longest pause between consecutive confirms since t.
func (l *load) maxGap(since time.Time) time.Duration {
	l.mu.Lock()
	var ts []time.Time
	for _, at := range l.confirmed {
		if at.end.After(since) {
			ts = append(ts, at.end)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	gap, prev := time.Duration(0), since
	for _, at := range ts {
		gap = max(gap, at.Sub(prev))
		prev = at
	}
	return gap
}

// report is one row of the table in docs/cluster.md.
type report struct {
	sent, confirmed, failed, handled, duplicates, lost int
}

func (r report) String() string {
	return fmt.Sprintf("sent %d, confirmed %d, failed %d, handled distinct %d, duplicates %d, lost %d",
		r.sent, r.confirmed, r.failed, r.handled, r.duplicates, r.lost)
}

// finish stops the senders, waits until every confirmed message has been
// handled (up to a minute), stops the consumer and checks that nothing
// confirmed was lost.
func (l *load) finish() report {
	l.t.Helper()
	close(l.stop)
	l.wg.Wait()
	deadline := time.Now().Add(time.Minute)
	var missing []string
	for {
		l.mu.Lock()
		missing = missing[:0]
		for id := range l.confirmed {
			if l.handled[id] == 0 {
				missing = append(missing, id)
			}
		}
		l.mu.Unlock()
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.cancel()
	select {
	case err := <-l.runErr:
		if err != nil {
			l.t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		l.t.Error("Run did not return within 30s of its ctx ending")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := report{sent: int(l.sent.Load()), confirmed: len(l.confirmed), failed: int(l.failed.Load()), handled: len(l.handled), lost: len(missing)}
	for _, n := range l.handled {
		r.duplicates += n - 1
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		l.t.Errorf("%d confirmed messages were never handled, e.g. %q\nlog:\n%s", len(missing), missing[:min(5, len(missing))], l.logs.String())
	}
	return r
}

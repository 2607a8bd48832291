package rabbitmq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// TestDialURLListErrors: a bad entry fails Dial with its position and
// never its password.
func TestDialURLListErrors(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-list"
	good := "amqp://u:" + secret + "@127.0.0.1:1/"
	for _, tc := range []struct {
		name, url, want string
	}{
		{"an empty entry", good + ",," + good, "entry 2 of the URL list"},
		{"a trailing comma", good + ",", "entry 2 of the URL list"},
		{"an unparsable entry", good + ",amqp://u:" + secret + "@127.0.0.1:99999999/", "entry 2 of the URL list"},
		{"another scheme", good + ",http://u:" + secret + "@h/", "entry 2 of the URL list"},
		{"another vhost", good + ",amqp://u:" + secret + "@127.0.0.1:2/other", `entry 2 of the URL list`},
		{"a single bad URL", "amqp://u:" + secret + "@127.0.0.1:99999999/", "the URL amqp://u:xxxxx@"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, err := rabbitmq.Dial(context.Background(), tc.url, rabbitmq.Config{})
			if err == nil {
				_ = tr.Close()
				t.Fatal("Dial succeeded")
			}
			t.Logf("%v", err)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("the error %q does not contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the password: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "rabbitmq: ") || strings.Count(err.Error(), "rabbitmq:") != 1 {
				t.Errorf("the error %q should begin with the one rabbitmq: prefix", err)
			}
		})
	}
}

// freeAddr returns a loopback address nothing listens on (for now).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestDialWaitsForTheBroker: Dial keeps trying a node that refuses
// connections until it starts listening.
func TestDialWaitsForTheBroker(t *testing.T) {
	broker := brokerURL(t)
	p := newProxy(t, hostOf(t, broker))
	p.stop()
	started := make(chan error, 1)
	go func() {
		time.Sleep(700 * time.Millisecond)
		started <- p.p.Start()
	}()
	defer func() {
		if err := <-started; err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr, err := rabbitmq.Dial(ctx, withHost(t, broker, p.addr), rabbitmq.Config{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("Dial did not wait for the broker: %v", err)
	}
	defer func() { _ = tr.Close() }()
	if err := tr.Health(ctxT(t)); err != nil {
		t.Errorf("Health after Dial: %v", err)
	}
}

// TestDialGivesUpWhenCtxEnds: with nothing listening, Dial returns when
// ctx ends, with an error that is ctx's and says what the last attempt met.
func TestDialGivesUpWhenCtxEnds(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-ctx"
	list := "amqp://u:" + secret + "@" + freeAddr(t) + "/,amqp://u:" + secret + "@" + freeAddr(t) + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	tr, err := rabbitmq.Dial(ctx, list, rabbitmq.Config{MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err == nil {
		_ = tr.Close()
		t.Fatal("Dial succeeded with nothing listening")
	}
	t.Logf("%v", err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(err, context.DeadlineExceeded) is false for %v", err)
	}
	for _, want := range []string{"the last attempt met", "connection refused", "attempts"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("the error shows the password: %v", err)
	}
	// An already-ended ctx fails at once with ctx's error.
	if _, err := rabbitmq.Dial(ctx, list, rabbitmq.Config{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial with an ended ctx: %v", err)
	}
}

// TestDialFailsAtOnceOnWhatNoRetryFixes: a refused login and a missing
// vhost are not retried: Dial returns long before its ctx ends, saying why.
func TestDialFailsAtOnceOnWhatNoRetryFixes(t *testing.T) {
	t.Parallel()
	broker := brokerURL(t)
	u, err := url.Parse(broker)
	if err != nil {
		t.Fatal(err)
	}
	badLogin := *u
	badLogin.User = url.UserPassword(u.User.Username(), "s3cret-wrong")
	noVhost := *u
	noVhost.Path = "/acemq-no-such-vhost"
	for _, tc := range []struct {
		name, url, want string
	}{
		{"bad credentials", badLogin.String(), "refused the login"},
		{"missing vhost", noVhost.String(), "refused the vhost"},
		{"bad credentials behind a dead node", "amqp://guest:x@" + freeAddr(t) + "/," + badLogin.String(), "refused the login"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tr, err := rabbitmq.Dial(ctx, tc.url, rabbitmq.Config{MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
			if err == nil {
				_ = tr.Close()
				t.Fatal("Dial succeeded")
			}
			t.Logf("%v", err)
			if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Dial retried until ctx ended: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("the error does not say %q: %v", tc.want, err)
			}
			if strings.Contains(err.Error(), "s3cret-wrong") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// syncBuffer is a log sink safe for the transport's goroutines.
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

// TestFailoverToTheNextNode stands two proxies in front of the broker as
// two "nodes". Stopping the node in use moves the transport to the other:
// Node says which, one log line names both and the outage, publishes go on,
// a consumer resumes, and a delivery from before the move cannot be acked.
func TestFailoverToTheNextNode(t *testing.T) {
	broker := brokerURL(t)
	a, b := newProxy(t, hostOf(t, broker)), newProxy(t, hostOf(t, broker))
	proxies := map[string]*proxy{a.addr: a, b.addr: b}
	list := withHost(t, broker, a.addr) + "," + withHost(t, broker, b.addr)
	var logs syncBuffer
	tr := dial(t, list, rabbitmq.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	q := queue(t, tr, "failover", nil)
	c := consume(t, tr, q, 10)
	publish := func(id string) {
		t.Helper()
		if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: id, Body: []byte(id)}); err != nil {
			t.Fatalf("Publish %s: %v", id, err)
		}
	}
	publish("before")
	stale := c.next(t)

	first := tr.Node()
	in, ok := proxies[hostOf(t, first)]
	if !ok {
		t.Fatalf("Node() = %q names neither node", first)
	}
	in.stop()
	eventually(t, 15*time.Second, "the transport moves to the other node", func() bool {
		n := tr.Node()
		return n != "" && n != first
	})
	publish("after")
	if err := stale.Ack(); err == nil {
		t.Error("a delivery from the lost node was acked on the new connection")
	}
	for {
		d := c.next(t)
		if d.MessageID == "after" {
			if err := d.Ack(); err != nil {
				t.Errorf("Ack after the move: %v", err)
			}
			break
		}
		_ = d.Ack() // "before", redelivered
	}
	log := logs.String()
	if !strings.Contains(log, "acemq: rabbitmq reconnected") || !strings.Contains(log, "from=") ||
		!strings.Contains(log, "to=") || !strings.Contains(log, "outage=") {
		t.Errorf("no log line names the move:\n%s", log)
	}
	if err := tr.Health(ctxT(t)); err != nil {
		t.Errorf("Health after the move: %v", err)
	}
	// The lost node back, the other one gone: the transport moves back.
	in.start()
	second := tr.Node()
	proxies[hostOf(t, second)].stop()
	eventually(t, 15*time.Second, "the transport moves back", func() bool { return tr.Node() == first })
	publish("back")
}

// TestHealthNamesTheNode: while no node answers, Health names the node
// that was lost and counts the attempts.
func TestHealthNamesTheNode(t *testing.T) {
	broker := brokerURL(t)
	a, b := newProxy(t, hostOf(t, broker)), newProxy(t, hostOf(t, broker))
	tr := dial(t, withHost(t, broker, a.addr)+","+withHost(t, broker, b.addr), rabbitmq.Config{})
	node := tr.Node()
	a.stop()
	b.stop()
	var health error
	eventually(t, 15*time.Second, "Health reports the outage", func() bool {
		health = tr.Health(ctxT(t))
		return health != nil && !strings.Contains(health.Error(), "(0 attempts")
	})
	t.Logf("%v", health)
	for _, want := range []string{node, "2 nodes in the list", "down since"} {
		if !strings.Contains(health.Error(), want) {
			t.Errorf("Health does not say %q: %v", want, health)
		}
	}
	a.start()
	eventually(t, 15*time.Second, "reconnected", func() bool { return tr.Health(ctxT(t)) == nil })
}

// TestNackAheadOfEarlierAcks: a publish the broker nacks at once while the
// acks of earlier publishes on the channel still wait fails with
// ErrNacked, although RabbitMQ then acks the earlier ones with one
// multiple ack whose range spans the nacked tag (amqp091-go reports that
// tag as acked to NotifyPublish). A batch of 50 persistent publishes to one
// queue, one to a full reject-publish queue, 50 more: the one fails after
// its nacks, the 100 arrive.
func TestNackAheadOfEarlierAcks(t *testing.T) {
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	full := queue(t, tr, "nack-ahead-full", map[string]any{"x-max-length": int64(1), "x-overflow": "reject-publish"})
	other := queue(t, tr, "nack-ahead-other", nil)
	if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: full, MessageID: "first"}); err != nil {
		t.Fatalf("the first publish: %v", err)
	}
	var ms []transport.Message
	for i := range 101 {
		m := transport.Message{RoutingKey: other, MessageID: fmt.Sprintf("m%d", i), Body: make([]byte, 4096)}
		if i == 50 {
			m = transport.Message{RoutingKey: full, MessageID: "refused"}
		}
		ms = append(ms, m)
	}
	errs := tr.PublishBatch(ctxT(t), ms)
	if !errors.Is(errs[50], transport.ErrNacked) {
		t.Errorf("the publish to the full queue = %v; want ErrNacked", errs[50])
	}
	seen := map[string]int{}
	for {
		d, ok, err := tr.Get(ctxT(t), other)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		seen[d.MessageID]++
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	for i, err := range errs {
		if i == 50 {
			continue
		}
		if err != nil {
			t.Errorf("publish m%d: %v", i, err)
		}
		if seen[fmt.Sprintf("m%d", i)] == 0 {
			t.Errorf("m%d is missing", i)
		}
	}
	if info, err := tr.Inspect(ctxT(t), full); err != nil || info.Messages != 1 {
		t.Errorf("the full queue holds %d messages (%v); want 1", info.Messages, err)
	}
}

// TestNackedPublish: a queue that refuses more than one message
// (reject-publish overflow) makes the broker nack the second publish. The
// publish is tried again on other channels, then fails wrapping
// transport.ErrNacked; the channels that nacked are replaced, and later
// publishes elsewhere go through.
func TestNackedPublish(t *testing.T) {
	tr := dial(t, brokerURL(t), rabbitmq.Config{})
	full := queue(t, tr, "nack-full", map[string]any{"x-max-length": int64(1), "x-overflow": "reject-publish"})
	other := queue(t, tr, "nack-other", nil)
	if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: full, MessageID: "first"}); err != nil {
		t.Fatalf("the first publish: %v", err)
	}
	err := tr.Publish(ctxT(t), transport.Message{RoutingKey: full, MessageID: "second"})
	if !errors.Is(err, transport.ErrNacked) {
		t.Fatalf("a publish to a full reject-publish queue = %v; want ErrNacked", err)
	}
	t.Logf("%v", err)
	for i := range 20 {
		if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: other, MessageID: "after"}); err != nil {
			t.Fatalf("publish %d after the nacks: %v", i, err)
		}
	}
	if info, err := tr.Inspect(ctxT(t), full); err != nil || info.Messages != 1 {
		t.Errorf("the full queue holds %d messages (%v); want 1", info.Messages, err)
	}
}

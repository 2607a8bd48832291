package rabbitmq

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq/internal/wire"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/internal/urls"
	"github.com/acemq/acemq/transport"
)

// Defaults applied by Dial to a zero Config field.
const (
	// DefaultConfirmWindow is the default Config.ConfirmWindow.
	DefaultConfirmWindow = 1024
	// DefaultChannels is the default Config.Channels: one publishing
	// channel, which costs the broker least per message.
	DefaultChannels = 1
	// DefaultMinBackoff is the default Config.MinBackoff.
	DefaultMinBackoff = 100 * time.Millisecond
	// DefaultMaxBackoff is the default Config.MaxBackoff.
	DefaultMaxBackoff = 15 * time.Second
	// DefaultHeartbeat is the default Config.Heartbeat.
	DefaultHeartbeat = 10 * time.Second
	// DefaultDialTimeout is the default Config.DialTimeout.
	DefaultDialTimeout = 10 * time.Second
)

// Config tunes a Transport. The zero value is ready to use; every field's
// comment gives its default.
type Config struct {
	// TLS is the client TLS configuration used for amqps:// URLs. Nil means
	// an empty configuration verifying the broker against the system roots.
	// Dial clones it, so the caller may reuse it.
	TLS *tls.Config

	// Logger receives reconnections, re-declarations and consumer restarts.
	// Nil means a logger that discards everything: the transport stays quiet
	// unless the application asks otherwise (the engine passes its own).
	Logger *slog.Logger

	// ConfirmWindow bounds the publishes written but not yet confirmed, plus
	// those queued for a channel, across the whole transport. A full window
	// makes Publish wait, up to its ctx. Zero means DefaultConfirmWindow.
	ConfirmWindow int

	// Channels is the number of publishing channels, each with its own
	// writer. Zero means DefaultChannels (one). Every publisher shares
	// them; more than one spreads the publishes over several channel
	// processes in the broker, which measured here costs the broker 15-25%
	// more CPU per message and is slower, so raise it only where a
	// measurement on your broker says otherwise. A publish to a missing
	// exchange never closes a publishing channel (the exchange is checked
	// first, on a channel of its own), so one channel is not a single point
	// of failure. The publishes of one ordering key stay on one channel
	// while any of them is in flight (see Transport.Publish).
	Channels int

	// MinBackoff and MaxBackoff bound the pause between rounds of
	// connection attempts (a round tries every node of the URL list once),
	// which doubles from MinBackoff up to MaxBackoff with jitter. Zero means
	// DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration

	// DialTimeout bounds one connection attempt to one node, TCP, TLS and
	// AMQP handshakes together, so that a node that accepts connections but
	// does not answer (frozen, partitioned) costs one timeout before the
	// next node is tried. Zero means DefaultDialTimeout.
	DialTimeout time.Duration

	// Heartbeat is the AMQP heartbeat interval that detects a dead peer.
	// Zero means DefaultHeartbeat.
	Heartbeat time.Duration

	// ConnectionName is shown by the broker's tools for the connection.
	// Empty means "acemq".
	ConnectionName string
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ConfirmWindow <= 0 {
		c.ConfirmWindow = DefaultConfirmWindow
	}
	if c.Channels <= 0 {
		c.Channels = DefaultChannels
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = c.MinBackoff
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.ConnectionName == "" {
		c.ConnectionName = "acemq"
	}
	return c
}

// Transport is a transport.Transport over one RabbitMQ connection that it
// re-establishes by itself. Create it with Dial; it is safe for concurrent
// use.
type Transport struct {
	cfg     Config
	url     string // the URL list as given, credentials included: never print it
	safeURL string // the list with its passwords redacted
	nodes   []node // the list's entries, in order
	log     *slog.Logger

	slots chan struct{} // the confirm window: one token per outstanding publish
	reqs  chan *pubReq  // publishes waiting for a writer, capacity = window

	mu        sync.Mutex
	sess      *session      // the live connection, nil while down
	up        chan struct{} // closed once sess is set; replaced when it is lost
	down      downState     // why and since when the connection is down
	gen       uint64        // connections made so far
	topo      []transport.Topology
	consumers map[*consumerState]struct{}
	closed    bool

	replyMu sync.Mutex
	reply   *replySession

	gets getChannel // the channel Get takes messages on

	heard atomic.Pointer[hearing] // the current (or last) connection's reads (liveness.go)
	fence fencing                 // the connection Fence runs on (fence.go)

	ord ordered // plugin kinds checked and leases held (plugin.go, lease.go)

	exchanges exchangeCheck // the exchanges known to exist

	pub atomic.Pointer[pubChannel] // a live publishing channel, or nil

	keys keyLanes // the ordering keys' publishes in flight (pubkeys.go)

	closing  chan struct{} // closed by Close
	stopCtx  context.Context
	stopFunc context.CancelFunc
	wg       sync.WaitGroup // every goroutine the transport started
}

var _ transport.Transport = (*Transport)(nil)

// Dial connects to the broker at url and returns a Transport that keeps a
// connection alive from then on. url is one amqp:// or amqps:// URL, or a
// comma-separated list of them naming the nodes of one cluster; an entry
// that is empty or does not parse fails Dial with an error naming it by
// position, its password redacted.
//
// Dial is eager and patient: it tries the nodes in turn, starting at a
// random one, with capped backoff between rounds, until one accepts the
// connection or ctx ends. A refused or unreachable node is tried again;
// what no retry fixes (a login the broker refuses, a missing vhost, a TLS
// certificate that does not verify) fails at once. When ctx ends first the
// error wraps ctx's error and says what the last attempt met.
func Dial(ctx context.Context, url string, cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults()
	nodes, err := parseNodes(url)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:       cfg,
		url:       url,
		safeURL:   Redact(url),
		nodes:     nodes,
		log:       cfg.Logger,
		slots:     make(chan struct{}, cfg.ConfirmWindow),
		reqs:      make(chan *pubReq, cfg.ConfirmWindow),
		up:        make(chan struct{}),
		consumers: make(map[*consumerState]struct{}),
		closing:   make(chan struct{}),
	}
	t.stopCtx, t.stopFunc = context.WithCancel(context.Background())
	s, err := t.connectFirst(ctx)
	if err != nil {
		t.stopFunc()
		return nil, err
	}
	t.setUp(s)
	t.wg.Add(1 + cfg.Channels)
	go t.supervise(s)
	for range cfg.Channels {
		go t.keepPublisher()
	}
	t.log.Info("acemq: rabbitmq connected", "node", t.nodes[s.node].safe, "nodes", len(t.nodes))
	return t, nil
}

// node is one entry of the URL list.
type node struct {
	url  string // as given: never print it
	safe string // redacted
}

// parseNodes splits and checks the URL list.
func parseNodes(list string) ([]node, error) {
	entries := urls.Split(list)
	nodes := make([]node, 0, len(entries))
	vhost := ""
	for i, e := range entries {
		where := "the URL " + Redact(e)
		if len(entries) > 1 {
			where = fmt.Sprintf("entry %d of the URL list %s", i+1, Redact(list))
		}
		if e == "" {
			return nil, fmt.Errorf("rabbitmq: %s is empty", where)
		}
		if s := urls.Scheme(e); s != "amqp" && s != "amqps" {
			return nil, fmt.Errorf("rabbitmq: %s is not an amqp:// or amqps:// URL", where)
		}
		uri, err := amqp.ParseURI(e)
		if err != nil {
			return nil, fmt.Errorf("rabbitmq: %s does not parse: %s", where, urls.Scrub(err.Error(), e))
		}
		if uri.Port < 1 || uri.Port > 65535 {
			return nil, fmt.Errorf("rabbitmq: %s does not parse: port %d is outside 1..65535", where, uri.Port)
		}
		if i > 0 && uri.Vhost != vhost {
			return nil, fmt.Errorf("rabbitmq: %s names vhost %q, entry 1 names %q: the nodes of one cluster share their vhosts", where, uri.Vhost, vhost)
		}
		vhost = uri.Vhost
		nodes = append(nodes, node{url: e, safe: Redact(e)})
	}
	return nodes, nil
}

// Node returns the URL of the node the transport is connected to, its
// password redacted, or "" while it is connected to none.
func (t *Transport) Node() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sess == nil {
		return ""
	}
	return t.nodes[t.sess.node].safe
}

// dial makes one AMQP connection to node i, bounded by ctx and
// Config.DialTimeout. Its error names the node, password redacted, and
// carries no "acemq:" prefix: the callers add what they were doing.
//
// The socket is layered: TCP, then internal/wire's batch conn (coalesced
// writes; see its doc for what an early Write return means), then TLS
// for amqps://, then wire's frame guard, so that the guard reads the broker's
// frames in the clear. TLS is therefore done here rather than by amqp091,
// which is handed the URL with the amqp scheme and the port made explicit.
func (t *Transport) dial(ctx context.Context, i int) (*amqp.Connection, error) {
	conn, _, err := t.dialHeard(ctx, i)
	return conn, err
}

// dialHeard is dial, also returning what records when the connection's
// socket last read anything from the broker (see liveness.go).
func (t *Transport) dialHeard(ctx context.Context, i int) (*amqp.Connection, *hearing, error) {
	n := t.nodes[i]
	h := newHearing()
	ctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	dialURL, tlsCfg, err := t.plainURL(n.url)
	if err != nil {
		return nil, nil, &nodeError{node: n.safe, err: t.scrub(err)}
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(t.cfg.ConnectionName)
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	conn, err := amqp.DialConfig(dialURL, amqp.Config{
		// The broker's frame_max, whatever it is: a broker configured
		// above amqp091's default of 128 KiB sends a message whose headers
		// are that big in one frame, and a client that asked for less
		// closes the connection on it (501), on every delivery of it.
		FrameSize:  amqp.FrameSizeUnlimited,
		Heartbeat:  t.cfg.Heartbeat,
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			raw, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The handshakes (TLS, AMQP) end with ctx; amqp091 clears the
			// deadline once the connection is open.
			if dl, ok := ctx.Deadline(); ok {
				if err := raw.SetDeadline(dl); err != nil {
					_ = raw.Close()
					return nil, err
				}
			}
			// On the socket itself, which nothing reassigns: the func runs
			// on a goroutine of its own when ctx ends mid-handshake.
			stop = context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Now()) })
			layered := wire.NewBatchConn(h.wrap(raw))
			if tlsCfg != nil {
				tc := tls.Client(layered, tlsCfg)
				if err := tc.HandshakeContext(ctx); err != nil {
					_ = tc.Close()
					return nil, err
				}
				layered = tc
			}
			return wire.NewGuard(layered), nil
		},
	})
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = errors.Join(ctx.Err(), err)
		}
		return nil, nil, &nodeError{node: n.safe, err: t.scrub(err)}
	}
	h.setHeartbeat(conn.Config.Heartbeat)
	return conn, h, nil
}

// nodeError is a failed attempt to connect to one node.
type nodeError struct {
	node string // redacted
	err  error
}

func (e *nodeError) Error() string { return e.node + ": " + e.err.Error() }
func (e *nodeError) Unwrap() error { return e.err }

// permanent reports whether a failed connection attempt met something no
// retry fixes: the broker refused the login or the vhost, or the broker's
// certificate does not verify. It returns what to tell the user.
func permanent(err error) (string, bool) {
	var (
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalid    x509.CertificateInvalidError
		verifyFail *tls.CertificateVerificationError
	)
	switch {
	case errors.Is(err, amqp.ErrCredentials), amqpCode(err) == amqp.AccessRefused:
		return "the broker refused the login (check the user name and password)", true
	case errors.Is(err, amqp.ErrVhost), amqpCode(err) == amqp.NotAllowed:
		return "the broker refused the vhost (it does not exist, or the user may not use it)", true
	case errors.Is(err, amqp.ErrSASL):
		return "the broker offers no login mechanism acemq speaks (PLAIN or AMQPLAIN)", true
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verifyFail):
		return "the broker's TLS certificate does not verify", true
	}
	return "", false
}

// plainURL returns the URL amqp091 dials and, for amqps://, the TLS
// configuration dial applies itself: the same URL (query parameters
// included) with the amqp scheme and the port made explicit (5671 unless
// given).
func (t *Transport) plainURL(raw string) (string, *tls.Config, error) {
	uri, err := amqp.ParseURI(raw)
	if err != nil {
		return "", nil, err
	}
	if uri.Scheme != "amqps" {
		return raw, nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.cfg.TLS != nil {
		cfg = t.cfg.TLS.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = uri.Host
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", nil, err
	}
	u.Scheme = "amqp"
	u.Host = net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	return u.String(), cfg, nil
}

// Close closes the connection and ends every goroutine the transport
// started. Publishes and requests still waiting fail with
// transport.ErrClosed, running Consume calls return an error wrapping it,
// and deliveries not yet settled are redelivered by the broker. Close is
// idempotent: later calls return nil.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.closing)
	t.mu.Unlock()
	t.stopFunc()
	t.wg.Wait()
	t.endLeases(nil)
	for _, r := range t.keys.sweep() {
		t.complete(r, errClosed("publish"))
	}
	for {
		select {
		case r := <-t.reqs:
			t.complete(r, errClosed("publish"))
		default:
			t.log.Info("acemq: rabbitmq transport closed", "nodes", t.safeURL)
			return nil
		}
	}
}

// track counts n goroutines about to start as the transport's, so Close
// waits for them; it refuses once Close has begun. Close sets closed under
// t.mu before it waits, so no count is added behind its back.
func (t *Transport) track(n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(n)
	return true
}

// ConfirmWindow is the bound on publishes queued or awaiting a confirm
// (Config.ConfirmWindow with its default applied).
func (t *Transport) ConfirmWindow() int { return t.cfg.ConfirmWindow }

// Outstanding is the number of publishes queued or awaiting a confirm
// right now: never more than ConfirmWindow. A publish whose caller gave up
// still counts until the transport drops it or its confirm arrives.
func (t *Transport) Outstanding() int { return len(t.slots) }

func (t *Transport) isClosed() bool {
	select {
	case <-t.closing:
		return true
	default:
		return false
	}
}

func errClosed(op string) error {
	return kindError(transport.ErrClosed, nil, "rabbitmq: %s: the transport is closed", op)
}

package acemq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq/transport"
)

// Conn is a connection to a broker with its interceptor chains, codecs,
// retry policy and instruments. It is safe for concurrent use; make one per
// process and share it.
type Conn struct {
	t         transport.Transport
	caps      capabilities
	cfg       connConfig
	metrics   *instruments
	publishes tracker // Sends and PublishRaws in flight

	// registryOps serialises, per ordered queue, what this Conn's
	// blocked-key registries do (queue -> *sync.Mutex; see
	// ordering.NewRegistry).
	registryOps sync.Map

	// stopping ends when Shutdown or Close begins: consumers stop taking
	// deliveries. closing ends when Close begins: handlers' contexts end.
	stopping     context.Context
	stopConsumes context.CancelFunc
	closing      context.Context
	abort        context.CancelFunc

	consumers sync.WaitGroup // running Consumer.Run calls
	consMu    sync.Mutex     // guards consumers.Add against Close's Wait
	runMu     sync.Mutex
	running   map[*engine]struct{} // the engines whose Run runs, for the paused gauge
	engines   map[*engine]struct{} // every engine made on the Conn, for HealthReport
	made      uint64               // engines registered so far; guarded by runMu
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	lastHint atomic.Pointer[unroutableMemo] // unroutableHint's last answer

	delays delays // the delay topology: declared, forwarded (delay.go)
}

// capabilities are the optional interfaces of a Conn's transport, resolved
// once when the Conn is made: nil where the transport has none. Whoever
// needs one checks for nil and says what is missing.
type capabilities struct {
	leaser   transport.Leaser           // Ordered, BlockedKeys, ReleaseKey
	handOver transport.HandOverConsumer // Ordered
	batch    transport.BatchPublisher   // SendAll, pipelined
	fencer   transport.Fencer           // Ordered: Message.Fence
	liveness transport.Liveness         // Ordered: the watchdog
	subs     transport.Subscriptions    // HealthReport: waiting or consuming
}

func capabilitiesOf(t transport.Transport) capabilities {
	var c capabilities
	c.leaser, _ = t.(transport.Leaser)
	c.handOver, _ = t.(transport.HandOverConsumer)
	c.batch, _ = t.(transport.BatchPublisher)
	c.fencer, _ = t.(transport.Fencer)
	c.liveness, _ = t.(transport.Liveness)
	c.subs, _ = t.(transport.Subscriptions)
	return c
}

func newConn(cfg connConfig) (*Conn, error) {
	m, err := newInstruments(cfg.meterProvider)
	if err != nil {
		_ = cfg.transport.Close()
		return nil, err
	}
	c := &Conn{t: cfg.transport, caps: capabilitiesOf(cfg.transport), cfg: cfg, metrics: m,
		running: make(map[*engine]struct{}), engines: make(map[*engine]struct{})}
	c.stopping, c.stopConsumes = context.WithCancel(context.Background())
	c.closing, c.abort = context.WithCancel(context.Background())
	if err := m.observeConsumers(c.pausedByQueue, c.oldestByQueue); err != nil {
		_ = cfg.transport.Close()
		return nil, err
	}
	return c, nil
}

// Transport returns the transport the Conn talks to.
func (c *Conn) Transport() transport.Transport { return c.t }

// Topology is something Conn.Declare creates: an Exchange, a Queue or a
// Binding.
type Topology = transport.Topology

// Exchange is a durable exchange; Kind is "direct" (the default), "topic",
// "fanout" or "headers".
type Exchange = transport.Exchange

// Queue is a durable queue; Quorum makes it a quorum queue and Args carries
// broker arguments such as x-message-ttl.
type Queue = transport.Queue

// Binding routes an exchange's messages with a routing key to a queue.
type Binding = transport.Binding

// ExchangeBinding routes an exchange's messages with a routing key to
// another exchange.
type ExchangeBinding = transport.ExchangeBinding

// RawMessage is a message ready for the wire: an envelope and an encoded
// body. Conn.PublishRaw sends one without running the publish chain.
type RawMessage struct {
	Exchange, RoutingKey string
	Envelope             *Envelope
	Body                 []byte
	ContentType          string
}

// PublishRaw sends m as it is, bypassing the publish interceptors, and
// returns once the broker confirmed it. Retries, dead letters, parking,
// replays and the outbox relay use it, so the envelope's Error travels (a
// Send leaves it off). An envelope that cannot be rendered (no ID, Version
// or Attempt below 1, a field too long for its AMQP property) or a header
// value AMQP cannot carry fails before anything is sent. Errors are
// otherwise as for Publisher.Send.
func (c *Conn) PublishRaw(ctx context.Context, m RawMessage) error {
	if m.Envelope == nil {
		return errors.New("acemq: PublishRaw was given a message without an envelope")
	}
	if !c.publishes.add() {
		return ErrClosed
	}
	defer c.publishes.done()
	if err := errors.Join(checkMessage(&m), c.checkSize(&m)); err != nil {
		c.metrics.published(ctx, m.Exchange, publishFailed, -1)
		return err
	}
	return c.sendWire(ctx, m.Envelope, render(m.Envelope, m.Exchange, m.RoutingKey, m.ContentType, m.Body, true), nowNano())
}

// PublishRawAll sends every message of msgs as PublishRaw would, with all
// of them in flight together (pipelined confirms, as SendAll), and returns
// once each is confirmed or has failed: one error per message, in msgs's
// order, nil for a confirmed one. Messages with one ordering key reach the
// broker in msgs's order, also when some are sent again after a connection
// loss, on a transport that implements transport.BatchPublisher (both
// shipped transports do); PublishRaw from several goroutines keeps no
// order. A message that
// cannot be rendered fails alone, before anything is sent, and the rest
// still go. The outbox relay sends its rows with it.
func (c *Conn) PublishRawAll(ctx context.Context, msgs []RawMessage) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	if !c.publishes.add() {
		for i := range errs {
			errs[i] = ErrClosed
		}
		return errs
	}
	defer c.publishes.done()
	results := make([]PublishResult, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if m.Envelope == nil {
			results[i].Err = fmt.Errorf("acemq: PublishRawAll was given a message without an envelope (message %d of %d)", i, len(msgs))
			continue
		}
		if err := errors.Join(checkMessage(m), c.checkSize(m)); err != nil {
			c.metrics.published(ctx, m.Exchange, publishFailed, -1)
			results[i].Err = err
		}
	}
	c.sendRendered(ctx, msgs, results, true)
	for i := range results {
		errs[i] = results[i].Err
	}
	return errs
}

// relocate is the one move acemq makes of a delivery, from its queue to
// another (a retry, a dead letter, a parking): it publishes msg,
// and only once the broker confirmed it, acks from (when not nil). err is
// the publish's, and from is then left unsettled; ackErr is the ack's. A
// failed ack loses nothing: the copy is safe and the original comes again,
// a duplicate the caller may log.
func (c *Conn) relocate(ctx context.Context, msg transport.Message, from *transport.Delivery) (ackErr, err error) {
	if err := c.publish(ctx, msg, nowNano()); err != nil {
		return nil, err
	}
	if from == nil {
		return nil, nil
	}
	return from.Ack(), nil
}

// send renders and publishes m, recording the publish metrics with the
// clock started at start, as a fresh message (no Error).
func (c *Conn) send(ctx context.Context, m RawMessage, start int64) error {
	return c.sendWire(ctx, m.Envelope, render(m.Envelope, m.Exchange, m.RoutingKey, m.ContentType, m.Body, false), start)
}

// sendWire publishes msg, rendered from env, into the delay topology when
// env is due later (After, At), otherwise as it is.
func (c *Conn) sendWire(ctx context.Context, env *Envelope, msg transport.Message, start int64) error {
	if err := c.intoDelay(ctx, env, &msg); err != nil {
		return err
	}
	return c.publish(ctx, msg, start)
}

// intoDelay readdresses msg, rendered from env, to the delay topology when
// env is due later (After, At), and leaves it as it is otherwise. Its
// error is a publish that failed, and is counted as one.
func (c *Conn) intoDelay(ctx context.Context, env *Envelope, msg *transport.Message) error {
	if env.Due.IsZero() {
		return nil
	}
	if err := c.delayed(ctx, msg, env.Due); err != nil {
		c.metrics.published(ctx, msg.Exchange, publishFailed, -1)
		return err
	}
	return nil
}

// publish puts msg on the transport, confirmed, and records the publish
// metrics with the clock started at start. The error names the message and
// where it was going; when ctx ended (before the publish, or before its
// confirm) it wraps ctx's error, in the same words whatever the transport.
// The engine's moves call it directly: they are allowed while the Conn
// shuts down, so in-flight deliveries can settle.
func (c *Conn) publish(ctx context.Context, msg transport.Message, start int64) error {
	err := ctx.Err()
	if err == nil {
		err = c.t.Publish(ctx, msg)
	}
	return c.published(ctx, msg, start, err)
}

// published records the metrics of msg's publish, whose transport outcome
// is err, and returns the error Send reports for it.
func (c *Conn) published(ctx context.Context, msg transport.Message, start int64, err error) error {
	outcome := publishConfirmed
	if err != nil {
		outcome = publishFailed
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			err = cerr // the transport's words for it differ; ctx's do not
		}
		where, hint := " to "+destination(msg.Exchange, msg.RoutingKey), ""
		if errors.Is(err, ErrUnroutable) {
			hint = c.unroutableHint(ctx, msg)
			if err != transport.ErrUnroutable {
				where = "" // the transport's own error names the exchange and key
			}
		}
		err = fmt.Errorf("acemq: publishing %s%s: %w%s", msg.MessageID, where, err, hint)
	}
	c.metrics.published(ctx, msg.Exchange, outcome, sinceSeconds(start))
	return err
}

// unroutableHint is what an unroutable publish to the default exchange
// adds when its key is the name of an ordered queue, which is no queue
// itself but an exchange in front of {queue}.p0 and the other partitions:
// where to publish instead. It looks for {key}.p0 passively, only on this
// failure path, and says nothing when it cannot tell.
// The last answer is kept for a second, so that a SendAll of many
// messages to the same key looks once.
func (c *Conn) unroutableHint(ctx context.Context, msg transport.Message) string {
	if msg.Exchange != "" || msg.RoutingKey == "" || ctx.Err() != nil {
		return ""
	}
	now := time.Now()
	if m := c.lastHint.Load(); m != nil && m.key == msg.RoutingKey && now.Sub(m.at) < time.Second {
		return m.hint
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := c.t.Inspect(ictx, PartitionQueue(msg.RoutingKey, 0))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return "" // cannot tell; not worth remembering
	}
	hint := ""
	if err == nil {
		hint = fmt.Sprintf("; %[1]q is an ordered queue: publish to the exchange %[1]q with a Key, not to the default exchange", msg.RoutingKey)
	}
	c.lastHint.Store(&unroutableMemo{key: msg.RoutingKey, hint: hint, at: now})
	return hint
}

// unroutableMemo is an answer of unroutableHint for a routing key.
type unroutableMemo struct {
	key, hint string
	at        time.Time
}

func destination(exchange, key string) string {
	if exchange == "" {
		return fmt.Sprintf("the default exchange with key %q", key)
	}
	return fmt.Sprintf("exchange %q with key %q", exchange, key)
}

// Declare creates exchanges, queues and bindings, idempotently. A
// declaration that conflicts with what the broker has fails with an error
// naming it. A transport that reconnects declares them again.
func (c *Conn) Declare(ctx context.Context, t ...Topology) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("acemq: declaring: %w", err)
	}
	if err := c.t.Declare(ctx, t...); err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return fmt.Errorf("acemq: declaring: %w", cerr)
		}
		return fmt.Errorf("acemq: declaring: %w", err)
	}
	return nil
}

// Health returns nil when the transport is connected and every consumer
// made on the Conn (and not closed with its Close) is running and
// consuming; otherwise an error saying what is down and since when, which
// wraps a sentinel per problem: ErrUnavailable for the connection (down,
// blocked by the broker, or a consumer's subscription lost: the consumer
// is then waiting), ErrNotRunning for a Consumer or Router that nothing
// runs (made but its Run not called, or its Run returned nil: nothing
// consumes its queue), ErrPaused for a running Consumer or Router paused
// by Pause (`consumer of "orders" paused by Pause since T`), ErrTripped
// for one its kill switch paused (`consumer of "orders" paused by the kill
// switch since T after N failures in W`, then when it probes next),
// ErrStuck for one whose handler has held a delivery longer than
// StuckAfter, ErrFaulted for a Consumer or Router whose Run returned an
// error, or a Router with an invalid route, from then on (running or not),
// and ErrClosed after Close. Nothing of a Nonessential consumer is an
// error, nor is a consumer closed with its Close, which leaves the report.
// HealthReport gives the same per connection and per consumer.
func (c *Conn) Health(ctx context.Context) error {
	return c.HealthReport(ctx).Err()
}

// register adds e to the engines HealthReport reports, until its Close
// or the Conn's, as starting since now.
func (c *Conn) register(e *engine) {
	e.setState(StateStarting, nil)
	c.runMu.Lock()
	c.made++
	e.seq = c.made
	c.engines[e] = struct{}{}
	c.runMu.Unlock()
}

// unregister takes e out of every list the Conn keeps: HealthReport's,
// the running ones (the paused and oldest_inflight gauges), and the
// metrics' attributes of its queue once no other engine consumes it.
func (c *Conn) unregister(e *engine) {
	c.runMu.Lock()
	delete(c.engines, e)
	delete(c.running, e)
	shared := false
	for o := range c.engines {
		shared = shared || o.queue == e.queue
	}
	c.runMu.Unlock()
	if !shared {
		c.metrics.forget(e.queue)
	}
}

// registeredEngines returns every engine made on the Conn, by queue and
// then by kind.
func (c *Conn) registeredEngines() []*engine {
	c.runMu.Lock()
	es := make([]*engine, 0, len(c.engines))
	for e := range c.engines {
		es = append(es, e)
	}
	c.runMu.Unlock()
	sortEngines(es)
	return es
}

// addRunning and removeRunning keep the set of engines whose Run runs.
func (c *Conn) addRunning(e *engine) {
	c.runMu.Lock()
	c.running[e] = struct{}{}
	c.runMu.Unlock()
}

func (c *Conn) removeRunning(e *engine) {
	c.runMu.Lock()
	delete(c.running, e)
	c.runMu.Unlock()
}

// runningEngines returns the running engines, by queue and then by kind.
func (c *Conn) runningEngines() []*engine {
	c.runMu.Lock()
	es := make([]*engine, 0, len(c.running))
	for e := range c.running {
		es = append(es, e)
	}
	c.runMu.Unlock()
	sortEngines(es)
	return es
}

func sortEngines(es []*engine) {
	slices.SortFunc(es, func(a, b *engine) int {
		return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(a.who, b.who), cmp.Compare(a.seq, b.seq))
	})
}

// pausedByQueue counts, for each queue a running engine consumes, how many
// of them are paused.
func (c *Conn) pausedByQueue() map[string]int64 {
	out := make(map[string]int64)
	for _, e := range c.runningEngines() {
		paused, _ := e.paused()
		if paused {
			out[e.queue]++
		} else {
			out[e.queue] += 0
		}
	}
	return out
}

// oldestByQueue is, for each queue a running engine consumes, how long the
// oldest delivery any of them holds in a handler has been there.
func (c *Conn) oldestByQueue() map[string]time.Duration {
	out := make(map[string]time.Duration)
	now := nowNano()
	for _, e := range c.runningEngines() {
		age, _, _ := e.busy.oldest(now)
		out[e.queue] = max(out[e.queue], age)
	}
	return out
}

// Shutdown drains the Conn and closes it: consumers stop taking deliveries,
// in-flight handlers settle, outstanding publishes get their confirms, then
// the transport closes. If ctx ends first, Shutdown closes at once and
// returns ctx's error. Publishes that start after the consumers have
// stopped fail with ErrClosed.
func (c *Conn) Shutdown(ctx context.Context) error {
	c.stopConsumes()
	done := make(chan struct{})
	go func() {
		c.consMu.Lock()
		c.consumers.Wait()
		c.consMu.Unlock()
		c.publishes.closeAndWait()
		close(done)
	}()
	select {
	case <-done:
		return c.Close()
	case <-ctx.Done():
		cerr := c.Close()
		<-done // Close ended the handlers and the transport; the waits end.
		return errors.Join(ctx.Err(), cerr)
	}
}

// Close closes the Conn now: handlers' contexts end, unsettled deliveries go
// back to the broker, publishes waiting for a confirm fail. It returns once
// every consumer's Run has returned. Close is idempotent; every call on a
// closed Conn fails with ErrClosed.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.metrics.stopObserving()
		c.stopConsumes()
		c.abort()
		c.publishes.shut()
		c.closeErr = c.t.Close()
		c.consMu.Lock()
		c.consumers.Wait()
		c.consMu.Unlock()
	})
	return c.closeErr
}

// startConsumer registers a running consumer, or reports the Conn closed.
func (c *Conn) startConsumer() bool {
	c.consMu.Lock()
	defer c.consMu.Unlock()
	if c.closed.Load() || c.stopping.Err() != nil {
		return false
	}
	c.consumers.Add(1)
	return true
}

// tracker counts calls in flight and refuses new ones once shut.
type tracker struct {
	mu       sync.Mutex
	n        int
	refusing bool
	zero     chan struct{}
}

func (t *tracker) add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.refusing {
		return false
	}
	t.n++
	return true
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 && t.zero != nil {
		close(t.zero)
		t.zero = nil
	}
	t.mu.Unlock()
}

// shut refuses new calls.
func (t *tracker) shut() {
	t.mu.Lock()
	t.refusing = true
	t.mu.Unlock()
}

// closeAndWait refuses new calls and waits for those in flight.
func (t *tracker) closeAndWait() {
	t.mu.Lock()
	t.refusing = true
	if t.n == 0 {
		t.mu.Unlock()
		return
	}
	if t.zero == nil {
		t.zero = make(chan struct{})
	}
	z := t.zero
	t.mu.Unlock()
	<-z
}

package acemq

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"time"
)

// Publisher sends values of type T to one exchange and routing key, through
// the Conn's publish interceptors and codec, and waits for the broker's
// confirm. It is safe for concurrent use; concurrent Sends are pipelined.
type Publisher[T any] struct {
	conn     *Conn
	exchange string
	key      string
	cfg      publisherConfig
	raw      bool
	keyBy    func(T) string // KeyBy's, checked by NewPublisher
	err      error          // an invalid option's: every Send returns it
}

// NewPublisher returns a Publisher of T to exchange with routingKey; the
// empty exchange is the default one, which routes to the queue the key
// names.
func NewPublisher[T any](c *Conn, exchange, routingKey string, opts ...PublisherOption) *Publisher[T] {
	p := &Publisher[T]{conn: c, exchange: exchange, key: routingKey}
	p.cfg.version = 1
	var zero T
	_, p.raw = any(zero).(Raw)
	if !p.raw {
		// Raw bytes are of no type acemq can name: a Publisher[Raw] writes
		// none unless TypeName gives one.
		p.cfg.typeName = typeName[T]()
	}
	for _, o := range opts {
		if o != nil {
			o.applyPublisher(&p.cfg)
		}
	}
	p.keyBy, p.err = checkPublisher[T](&p.cfg)
	if p.err != nil && c != nil {
		c.cfg.logger.Error("acemq: a publisher was given an invalid option; every Send fails", "exchange", exchange, "routing_key", routingKey, "error", p.err)
	}
	if !p.raw && p.cfg.contentType != "" && c != nil {
		c.cfg.logger.Warn("acemq: ContentType is for a Publisher[Raw]; this publisher writes its codec's content type (WithCodec)",
			"exchange", exchange, "routing_key", routingKey, "type", p.cfg.typeName, "content_type", p.cfg.contentType)
	}
	if p.raw && p.cfg.contentType == "" {
		p.cfg.contentType = rawContentType
	}
	return p
}

var errNoConn = errors.New("acemq: the publisher was made with a nil Conn")

// typeName is T's name without its package, "OrderPlaced"; a pointer type
// is named by what it points to.
func typeName[T any]() string {
	t := reflect.TypeFor[T]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n := t.Name(); n != "" {
		return n
	}
	return t.String()
}

// goTypeName is T's name without its package but with its pointers,
// "*OrderPlaced": for an error that must tell T from *T.
func goTypeName[T any]() string {
	stars := ""
	t := reflect.TypeFor[T]()
	for t.Kind() == reflect.Pointer && t.Name() == "" {
		stars, t = stars+"*", t.Elem()
	}
	if n := t.Name(); n != "" {
		return stars + n
	}
	return stars + t.String()
}

// PublishResult is the fate of one payload of SendAll: its message ID and
// the error Send would have returned.
type PublishResult struct {
	ID  string
	Err error
}

// Send publishes v and returns once the broker confirmed it. A publish
// interceptor's refusal is returned as it is (== holds). An envelope the
// interceptors left unrenderable (an empty ID, a Version or Attempt below 1,
// a field longer than its AMQP property's 255 bytes) or a header value AMQP
// cannot carry fails with the reason before anything is sent. Otherwise the
// error wraps ErrUnroutable, ErrNacked, ErrClosed or, when ctx ended, ctx's
// error (errors.Is holds), naming the message and its destination. A
// message that was not confirmed is never reported as sent.
func (p *Publisher[T]) Send(ctx context.Context, v T, opts ...SendOption) error {
	if perMessageOf(opts) != nil {
		return p.SendAll(ctx, []T{v}, opts...)[0].Err // PerMessage's one path
	}
	_, err := p.send(ctx, v, opts)
	return err
}

func (p *Publisher[T]) send(ctx context.Context, v T, opts []SendOption) (string, error) {
	if p == nil || p.conn == nil {
		return "", errNoConn
	}
	if !p.conn.publishes.add() {
		return "", ErrClosed
	}
	defer p.conn.publishes.done()
	m, err := p.prepare(ctx, v, opts)
	if err != nil {
		return idOf(m), err
	}
	return m.Envelope.ID, p.conn.send(ctx, m, nowNano())
}

func idOf(m RawMessage) string {
	if m.Envelope == nil {
		return ""
	}
	return m.Envelope.ID
}

// SendAll publishes every value of vs and returns one result per value, in
// vs's order, each with the message ID and the error Send would have
// returned. It works in two steps, whatever the batch's size. First the
// publish chain and the codec run for every value, concurrently (with
// interceptors, on one goroutine per value, so an interceptor keeping state
// must be safe for concurrent use; the chain does not run in payload order).
// Only then is every accepted message published, pipelined, and the
// confirms awaited together: the whole chain has run before any confirm is
// awaited. A refusal is the interceptor's very error value, as with Send.
func (p *Publisher[T]) SendAll(ctx context.Context, vs []T, opts ...SendOption) []PublishResult {
	results := make([]PublishResult, len(vs))
	pm := perMessageOf(opts)
	fail := func(err error) []PublishResult {
		for i := range results {
			results[i].Err = err
			if pm != nil {
				_, done := pm(ctx)
				done("", err)
			}
		}
		return results
	}
	switch {
	case len(vs) == 0:
		return results
	case p == nil || p.conn == nil:
		return fail(errNoConn)
	case !p.conn.publishes.add():
		return fail(ErrClosed)
	}
	defer p.conn.publishes.done()
	msgs := make([]RawMessage, len(vs))
	var done []func(string, error)
	if pm != nil {
		done = make([]func(string, error), len(vs))
	}
	p.prepareAll(ctx, vs, opts, pm, done, msgs, results)
	p.conn.sendBatch(ctx, msgs, results)
	for i, d := range done {
		d(results[i].ID, results[i].Err)
	}
	return results
}

// prepareAll runs prepare for every value of vs, concurrently, into msgs
// and results. With a publish chain each value gets a goroutine of its own,
// as the interceptors' documentation promises; without one no user code
// runs, and a goroutine per core does the encoding. With pm, each value is
// prepared with the context pm gives it, and done[i] is what pm returned
// with it.
func (p *Publisher[T]) prepareAll(ctx context.Context, vs []T, opts []SendOption, pm perMessage, done []func(string, error), msgs []RawMessage, results []PublishResult) {
	one := func(i int) {
		ctx := ctx
		if pm != nil {
			ctx, done[i] = pm(ctx)
		}
		m, err := p.prepare(ctx, vs[i], opts)
		msgs[i], results[i].ID, results[i].Err = m, idOf(m), err
	}
	if len(vs) == 1 { // one value: its chain runs on the caller's goroutine
		one(0)
		return
	}
	var wg sync.WaitGroup
	if len(p.conn.cfg.publishChain) > 0 {
		for i := range vs {
			wg.Go(func() { one(i) })
		}
		wg.Wait()
		return
	}
	// Contiguous shares, so that no two goroutines write neighbouring
	// results (which would share cache lines) or contend on a counter.
	workers := min(len(vs), runtime.GOMAXPROCS(0))
	for w := range workers {
		lo, hi := w*len(vs)/workers, (w+1)*len(vs)/workers
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				one(i)
			}
		})
	}
	wg.Wait()
}

// Prepare runs the publish chain and the codec on v, as Send would, and
// returns the message ready for Conn.PublishRaw without sending it. It
// fails as Send would on an envelope that cannot be rendered, so a message
// it returns can travel. The outbox uses it to store a message at write
// time.
func (p *Publisher[T]) Prepare(ctx context.Context, v T, opts ...SendOption) (RawMessage, error) {
	if p == nil || p.conn == nil {
		return RawMessage{}, errNoConn
	}
	if p.conn.closed.Load() {
		return RawMessage{}, ErrClosed
	}
	return p.prepare(ctx, v, opts)
}

// prepare builds the message for v and records, in this one place, the
// publish metrics of a message that never reaches the transport: refused
// by an interceptor, or failed (an option, the checks, the codec).
func (p *Publisher[T]) prepare(ctx context.Context, v T, opts []SendOption) (RawMessage, error) {
	m, refused, err := p.build(ctx, v, opts)
	if err != nil {
		outcome, exchange := publishFailed, p.exchange
		if refused {
			outcome = publishRefused
		}
		if m.Envelope != nil {
			exchange = m.Exchange // where the chain sent it
		}
		p.conn.metrics.published(ctx, exchange, outcome, -1)
	}
	return m, err
}

// build runs the options, the publish chain, the checks and the codec on
// v; refused says an interceptor refused it.
func (p *Publisher[T]) build(ctx context.Context, v T, opts []SendOption) (m RawMessage, refused bool, err error) {
	if p.err != nil {
		return RawMessage{}, false, p.err
	}
	sc := &noSendOptions // read only: a Send without options allocates none
	if len(opts) > 0 {
		sc = &sendConfig{}
		for _, o := range opts {
			if o != nil {
				o.applySend(sc)
			}
		}
	}
	if len(sc.errs) > 0 {
		return RawMessage{}, false, errors.Join(sc.errs...)
	}
	env := p.envelope(ctx, sc)
	if env.Key == "" && p.keyBy != nil {
		env.Key = p.keyBy(v)
	}
	m = RawMessage{Exchange: p.exchange, RoutingKey: p.key, Envelope: env}
	if chain := p.conn.cfg.publishChain; len(chain) > 0 {
		// Only a chain needs the PublishContext and the boxed payload. The
		// context is the interceptors' to keep: it is never reused.
		pc := &PublishContext{Exchange: p.exchange, RoutingKey: p.key, Payload: v, Envelope: env}
		err := runPublishChain(ctx, chain, pc)
		m.Exchange, m.RoutingKey = pc.Exchange, pc.RoutingKey
		if pc.Envelope != nil {
			m.Envelope = pc.Envelope
		}
		if replaced, ok := pc.Payload.(T); ok && err == nil {
			v = replaced
		}
		if err != nil {
			return RawMessage{Exchange: m.Exchange, Envelope: env}, true, err
		}
	}
	codec := p.conn.cfg.codec
	if p.raw {
		m.ContentType = p.cfg.contentType
	} else {
		m.ContentType = codec.ContentType()
	}
	if err := checkMessage(&m); err != nil {
		return m, false, err
	}
	if p.raw {
		m.Body = []byte(any(v).(Raw))
		return m, false, p.conn.encoded(ctx, &m)
	}
	body, err := codec.Encode(v)
	if err != nil {
		return m, false, fmt.Errorf("acemq: encoding a %s as %s: %w", p.cfg.typeName, m.ContentType, err)
	}
	m.Body = body
	return m, false, p.conn.encoded(ctx, &m)
}

// noSendOptions is the configuration of a Send given no options. It is
// never written.
var noSendOptions sendConfig

// envelope builds the envelope of a new message: options first, then what
// the delivery being handled (if ctx carries one) implies, then defaults.
func (p *Publisher[T]) envelope(ctx context.Context, sc *sendConfig) *Envelope {
	env := &Envelope{
		ID:            sc.id,
		Type:          p.cfg.typeName,
		Version:       p.cfg.version,
		CorrelationID: sc.correlationID,
		CausationID:   sc.causationID,
		Attempt:       1,
		FirstSeen:     wireTime(time.Now()), // as the AMQP timestamp carries it
		Origin:        p.conn.cfg.origin,
		Key:           sc.key,
		Due:           sc.due,
		Headers:       sc.headers,
		reserved:      sc.reserved,
	}
	if env.ID == "" {
		env.ID = newID()
	}
	if in := incoming(ctx); in != nil {
		if env.CorrelationID == "" {
			env.CorrelationID = in.CorrelationID
			if env.CorrelationID == "" {
				env.CorrelationID = in.ID
			}
		}
		if env.CausationID == "" {
			env.CausationID = in.ID
		}
	}
	return env
}

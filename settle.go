package acemq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq/internal/ordering"
	"github.com/acemq/acemq/internal/wire"
	"github.com/acemq/acemq/transport"
)

// The settle core: every delivery of every mode goes parse → screen →
// serve → settle through the functions of this file, once. What differs
// between the modes is who calls them (a worker, a batch worker, a lane)
// and the fate: what becomes of a delivery whose verdict is not an ack.

// fate is a mode's failure policy.
type fate interface {
	// begin adjusts a delivery's envelope once it is parsed (an ordered
	// retry in place carries its attempt on) and says where the delivery
	// came from: its partition (-1 when not ordered) and its holder's
	// fencing token (0 when none), for its Message.
	begin(env *Envelope) (part int, fence uint64)
	// yield reports whether the delivery goes back to the broker
	// unsettled, whatever its verdict, because another holder handles it;
	// err is what the handler answered (nil before it ran). A delivery
	// that yields has been given back.
	yield(ctx context.Context, err error) bool
	// carry carries out v, which is not an ack, for d, and returns it as
	// carried out (an ordered retry's delay cut to what is left). When it
	// cannot, it has given the delivery back and says where to (for the
	// reason) and why.
	carry(ctx context.Context, e *engine, d transport.Delivery, env *Envelope, v verdict) (done verdict, back string, err error)
}

// plainFate moves a delivery to its tier, .dlq or .parked, once; a move
// that fails puts the delivery back on its queue after a pause.
type plainFate struct{}

func (plainFate) begin(*Envelope) (int, uint64)     { return -1, 0 }
func (plainFate) yield(context.Context, error) bool { return false }

func (plainFate) carry(ctx context.Context, e *engine, d transport.Delivery, env *Envelope, v verdict) (verdict, string, error) {
	if err := e.move(ctx, d, env, v); err != nil {
		pause := e.moveBackoff(true)
		e.conn.cfg.logger.Log(ctx, e.failureLevel(ctx), "acemq: moving a delivery failed; it goes back to its queue",
			"queue", e.queue, "id", env.ID, "outcome", string(v.outcome), "retry_in", pause, "error", err)
		ordering.Sleep(ctx, pause)
		_ = d.Nack(true)
		return v, e.queue, err
	}
	e.moveBackoff(false)
	return v, "", nil
}

// route is the typed part of a delivery: decode the body into its T, run
// its handler and judge what it asked for. It returns the verdict and the
// handler's time in seconds (negative when the handler did not run).
type route interface {
	serve(ds *delivery, e *engine, d transport.Delivery) (verdict, float64)
}

// typedRoute is a Handler[T] (or, for a batch consumer, a
// BatchHandler[T]) with what it takes to decode for it.
type typedRoute[T any] struct {
	handler Handler[T]
	batch   BatchHandler[T] // a batch consumer's; handler is then nil
	name    string          // T's name, for reasons
}

// serve decodes d and runs the handler on it, in ds, the delivery's
// context. (A batch consumer's deliveries go to serveBatch instead.)
func (r *typedRoute[T]) serve(ds *delivery, e *engine, d transport.Delivery) (verdict, float64) {
	m, v, ok := decodeMessage[T](ds, e, d, r.name)
	if !ok {
		return v, -1
	}
	start := nowNano()
	slot := e.busy.begin(start, ds.env.ID)
	ack, p := guard(func() Ack { return r.handler(ds, m) })
	e.busy.end(slot)
	if p != nil {
		e.logPanic(p, "id", ds.env.ID)
	}
	return e.judge(ds.env, ack, p), sinceSeconds(start)
}

// decodeMessage decodes d's body for a handler of T named name: the one
// decode of every mode, after screen passed the delivery, whose state ds
// holds. A body that does not decode (or whose claim-checked body cannot
// be loaded back, see BodyStore.Load) gets the verdict that parks it, or
// dead-letters it at once when the load's error is marked Fatal, and ok
// false.
func decodeMessage[T any](ds *delivery, e *engine, d transport.Delivery, name string) (m *Message[T], v verdict, ok bool) {
	// The body decodes straight into the Message: one allocation, not two.
	m = &Message[T]{Envelope: ds.env, Queue: e.queue, Redelivered: d.Redelivered, part: ds.part, fence: ds.fence}
	if err := e.conn.decode(ds, ds.env, d.ContentType, d.Body, &m.Payload, name, e.cfg.maxBody); err != nil {
		var le loadError
		if errors.As(err, &le) && errors.Is(err, ErrFatal) {
			return nil, verdict{outcome: OutcomeDeadLettered, reason: err.Error()}, false
		}
		return nil, verdict{outcome: OutcomeParked, reason: err.Error()}, false
	}
	return m, verdict{}, true
}

// handlerPanic is what a handler's panic left: its value and the stack.
type handlerPanic struct {
	value any
	stack []byte
}

// guard runs fn, turning a panic into a handlerPanic.
func guard[R any](fn func() R) (r R, p *handlerPanic) {
	defer func() {
		if v := recover(); v != nil {
			p = &handlerPanic{value: v, stack: debug.Stack()}
		}
	}()
	return fn(), nil
}

// logPanic logs a handler's panic, once, with its stack and the message
// (or messages) it was handling.
func (e *engine) logPanic(p *handlerPanic, idKey string, id any) {
	e.conn.cfg.logger.Error("acemq: a handler panicked",
		"queue", e.queue, idKey, id, "panic", fmt.Sprint(p.value), "stack", string(p.stack))
}

// process takes one delivery from parse to settlement and returns the
// verdict carried out (zero when none could be, or when the delivery
// yielded: see fate.yield).
func (e *engine) process(ctx context.Context, d transport.Delivery, f fate) verdict {
	ds, r, v := e.prepare(ctx, d, f)
	if r == nil {
		return v
	}
	v, seconds := r.serve(ds, e, d)
	return e.settle(ds, d, v, seconds, f)
}

// prepare takes a delivery through all that comes before its handler: the
// envelope, the consume interceptors, the checks and the choice of route.
// A delivery that goes no further is settled here (or yields: its
// partition is lost): the route is nil and the verdict is what settled
// it. The delivery state returned is also the context to serve and settle
// it in.
func (e *engine) prepare(ctx context.Context, d transport.Delivery, f fate) (*delivery, route, verdict) {
	env, perr := parseEnvelope(&d.Message)
	if !env.Due.IsZero() && env.Attempt == 1 && !d.Redelivered {
		e.conn.metrics.lateness(ctx, e.queue, time.Since(env.Due).Seconds())
	}
	part, fence := f.begin(env)
	ds := &delivery{Context: ctx, env: env, part: part + 1, fence: fence, redelivered: d.Redelivered}
	if f.yield(ds, nil) {
		return ds, nil, verdict{}
	}
	r, v := e.screen(ds, d, perr)
	if r == nil {
		return ds, nil, e.settle(ds, d, v, -1, f)
	}
	return ds, r, verdict{}
}

// screen runs the consume interceptors and the checks on a delivery whose
// envelope ds holds (perr is what parsing it said) and picks its route.
// The route is nil when the delivery goes no further; the verdict then
// says where it goes. An interceptor's envelope replaces ds.env.
func (e *engine) screen(ds *delivery, d transport.Delivery, perr error) (route, verdict) {
	env := ds.env
	if chain := e.conn.cfg.consumeChain; len(chain) > 0 {
		// The context is the interceptors' to keep (a WhenSettled closure
		// may hold it): it is never reused.
		cc := &ConsumeContext{Queue: e.queue, Envelope: env, Body: bytes.Clone(d.Body), ContentType: d.ContentType}
		reason := runConsumeChain(ds, chain, cc)
		if cc.Envelope != nil {
			env, ds.env = cc.Envelope, cc.Envelope
		}
		if env.Headers == nil {
			env.Headers = make(map[string]any)
		}
		if reason != "" {
			return nil, verdict{outcome: OutcomeDeadLettered, reason: reason}
		}
	}
	if perr != nil {
		return nil, verdict{outcome: OutcomeParked, reason: "the envelope is unreadable: " + perr.Error(), original: true}
	}
	if len(d.Body) > e.cfg.maxBody {
		return nil, verdict{outcome: OutcomeParked, reason: fmt.Sprintf("the body is %d bytes, over the limit of %d", len(d.Body), e.cfg.maxBody)}
	}
	if len(d.Headers) > 0 {
		if n := wire.TableSize(d.Headers); n > MaxHeaderSize {
			return nil, verdict{outcome: OutcomeParked, reason: fmt.Sprintf("the headers are %d bytes, over the limit of %d (MaxHeaderSize): a peer with RabbitMQ's default frame_max could not take them", n, MaxHeaderSize)}
		}
	}
	if v, ok := e.mode.admit(d, env); !ok {
		return nil, v
	}
	r, reason := e.pick(env.Type)
	if r == nil {
		return nil, verdict{outcome: OutcomeParked, reason: reason}
	}
	return r, verdict{}
}

// verdict is what the engine decided for a delivery.
type verdict struct {
	outcome  Outcome
	reason   string
	delay    time.Duration
	ack      Ack
	original bool // park with the delivery's own headers, as evidence
	failed   bool // a failure to the kill switch: retried, attempts spent, a panic
	keyless  bool // parked by an ordered consumer for want of a key
}

// judge turns what the handler asked for into a verdict, applying the
// retry policy; p is the handler's panic, if it panicked.
func (e *engine) judge(env *Envelope, ack Ack, p *handlerPanic) verdict {
	if p != nil {
		return verdict{outcome: OutcomeRejected, reason: fmt.Sprintf("the handler panicked: %v", p.value), ack: ack, failed: true}
	}
	v := verdict{ack: ack}
	switch ack.kind {
	case AckDone:
		v.outcome = OutcomeAcked
	case AckReject:
		v.outcome, v.reason = OutcomeRejected, "the handler rejected it: "+errText(ack.err)
	case AckFatal:
		v.outcome, v.reason = OutcomeDeadLettered, errText(ack.err)
	case AckPark:
		v.outcome, v.reason = OutcomeParked, "the handler parked it: "+errText(ack.err)
	case AckRetry:
		switch {
		case errors.Is(ack.err, ErrFatal):
			v.outcome, v.reason = OutcomeDeadLettered, errText(ack.err)
		case env.Attempt >= e.policy.MaxAttempts:
			v.outcome, v.failed = OutcomeDeadLettered, true
			v.reason = fmt.Sprintf("gave up after %d attempts: %s", env.Attempt, errText(ack.err))
		default:
			v.outcome, v.reason, v.failed = OutcomeRetried, errText(ack.err), true
			switch {
			case ack.delay > 0 && e.policy.ThroughDelay:
				v.delay = min(ack.delay, MaxDelay)
			case ack.delay > 0:
				v.delay = tierFor(e.tiers, ack.delay)
			default:
				v.delay = e.policy.delayFor(env.Attempt + 1)
			}
		}
	default:
		v.outcome, v.reason = OutcomeRejected, "the handler returned no Ack (use Done, Retry, Reject or AckOf)"
	}
	return v
}

func errText(err error) string {
	if err == nil {
		return "no reason given"
	}
	return err.Error()
}

// settle carries out a verdict, the one settlement of every mode: an ack,
// or the fate's carry for any other verdict; then the metrics, the kill
// switch and the callbacks. ds is the delivery's state and its context.
// When the ack failed (the broker delivers again), the fate could not
// carry the verdict out, or the delivery yielded to another holder, the
// message's callbacks hear why with no outcome, and the verdict returned
// is zero.
func (e *engine) settle(ds *delivery, d transport.Delivery, v verdict, handlerSeconds float64, f fate) verdict {
	ctx, env := context.Context(ds), ds.env
	v.reason = clipReason(v.reason)
	if f.yield(ctx, v.ack.err) {
		if errors.Is(v.ack.err, ErrPartitionLost) {
			e.conn.metrics.fenced(ctx, e.queue)
		}
		s := e.settlement(ds, v)
		s.Outcome = ""
		s.Reason = "the partition was lost to this instance, so the delivery went back to its queue unsettled"
		e.runCallbacks(ctx, ds, s, false)
		return verdict{}
	}
	if v.outcome == OutcomeAcked {
		if err := d.Ack(); err != nil {
			// Not settled: the broker delivers it again, so the message's
			// callbacks (blob.DeleteOnDone's among them) hear no outcome.
			e.conn.cfg.logger.Log(ctx, e.failureLevel(ctx), "acemq: acking a delivery failed; the broker will deliver it again",
				"queue", e.queue, "id", env.ID, "error", err)
			s := e.settlement(ds, v)
			s.Outcome = ""
			s.Reason = "the ack failed, so the broker will deliver the message again: " + err.Error()
			e.runCallbacks(ctx, ds, s, false)
			return verdict{}
		}
	} else {
		done, back, err := f.carry(ctx, e, d, env, v)
		if err != nil {
			s := e.settlement(ds, done)
			s.Outcome = ""
			s.Reason = fmt.Sprintf("the move to %s failed, so the delivery went back to %s: %s", e.target(v), back, err.Error())
			e.runCallbacks(ctx, ds, s, false)
			return verdict{}
		}
		v = done
	}
	e.conn.metrics.settled(ctx, e.queue, v.outcome, handlerSeconds)
	if ds.redelivered {
		e.conn.metrics.redelivery(ctx, e.queue, v.outcome)
	}
	if v.keyless {
		e.conn.metrics.parkedKeyless(ctx, e.queue)
	}
	e.observe(v.failed, handlerSeconds >= 0)
	e.runCallbacks(ctx, ds, e.settlement(ds, v), true)
	return v
}

// settlement is what the callbacks hear of v.
func (e *engine) settlement(ds *delivery, v verdict) Settlement {
	return Settlement{
		Queue: e.queue, Envelope: ds.env, Outcome: v.outcome, Reason: v.reason,
		Delay: v.delay, Attempt: ds.env.Attempt, Ack: v.ack, Redelivered: ds.redelivered,
	}
}

// Bounds of the pause before a delivery whose move failed goes back to its
// queue. A move that keeps failing (its target queue deleted, the broker
// refusing) would otherwise bring the same message straight back, and the
// consumer would spin on it.
const (
	minMovePause = 50 * time.Millisecond
	maxMovePause = 5 * time.Second
)

// moveBackoff records a move that failed (or, with failed false, one that
// worked) and returns how long to pause: doubling from minMovePause with
// each consecutive failure, up to maxMovePause.
func (e *engine) moveBackoff(failed bool) time.Duration {
	if !failed {
		e.moveFailures.Store(0)
		return 0
	}
	n := min(e.moveFailures.Add(1)-1, 16)
	return min(minMovePause<<n, maxMovePause)
}

// maxReason bounds a reason. It travels as the x-acemq-error header, and a
// hostile body (a decode error quoting it) or a careless error text must
// not make it too big for the broker to take.
const maxReason = 4096

// clipReason cuts s to maxReason bytes, on a rune boundary, marking the cut.
// Invalid UTF-8 (a decode error quoting a hostile body) is replaced first:
// the reason travels as a header the next consumer reads as text.
func clipReason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// target is the queue a verdict moves the message to.
func (e *engine) target(v verdict) string {
	switch v.outcome {
	case OutcomeRetried:
		return RetryQueue(e.queue, v.delay)
	case OutcomeParked:
		return ParkingQueue(e.queue)
	}
	return DeadLetterQueue(e.queue)
}

// move republishes the message to the verdict's queue and, once the broker
// confirmed it, acks the original.
func (e *engine) move(ctx context.Context, d transport.Delivery, env *Envelope, v verdict) error {
	target := e.target(v)
	var msg transport.Message
	if v.original {
		// The envelope did not parse: keep the headers exactly as they
		// arrived, so whoever reads the parking queue sees the damage.
		msg = d.Message
		msg.Exchange, msg.RoutingKey = "", target
		msg.Headers = maps.Clone(d.Headers)
		maps.DeleteFunc(msg.Headers, func(k string, _ any) bool { return isBrokerHeader(k) })
		if msg.Headers == nil || len(msg.Headers) >= maxTableEntries {
			// None, or no room for one more: the reason says how many.
			msg.Headers = make(map[string]any, 1)
		}
		msg.Headers[hdrError] = v.reason
		if msg.MessageID == "" {
			msg.MessageID = env.ID
		}
	} else {
		next := env.Clone()
		next.Error = v.reason
		if v.outcome == OutcomeRetried {
			next.Attempt++
		}
		if v.outcome == OutcomeRetried && e.policy.ThroughDelay {
			// Back to the queue itself, through the delay topology.
			msg = render(next, "", e.queue, d.ContentType, d.Body, true)
			if err := e.conn.delayed(ctx, &msg, time.Now().Add(v.delay)); err != nil {
				return err
			}
		} else {
			msg = render(next, "", target, d.ContentType, d.Body, true)
		}
	}
	ackErr, err := e.conn.relocate(ctx, msg, &d)
	if err != nil {
		return err
	}
	if ackErr != nil {
		// The successor is safe; the original will come again and be
		// handled again: at least once, never lost.
		e.conn.cfg.logger.Warn("acemq: acking a moved delivery failed; the broker will deliver it again",
			"queue", e.queue, "id", env.ID, "error", ackErr)
	}
	return nil
}

// runCallbacks runs the delivery's WhenSettled callbacks, last first, and
// then, for a real settlement, the Conn's OnSettled hooks. A panicking
// callback is logged and the rest still run.
func (e *engine) runCallbacks(ctx context.Context, ds *delivery, s Settlement, hooks bool) {
	ds.mu.Lock()
	cbs := ds.callbacks
	ds.callbacks = nil
	ds.mu.Unlock()
	for i := len(cbs) - 1; i >= 0; i-- {
		e.safeCallback(ctx, cbs[i], s)
	}
	if hooks {
		for _, fn := range e.conn.cfg.onSettled {
			e.safeCallback(ctx, fn, s)
		}
	}
}

func (e *engine) safeCallback(ctx context.Context, fn func(context.Context, Settlement), s Settlement) {
	defer func() {
		if r := recover(); r != nil {
			e.conn.cfg.logger.Error("acemq: a settlement callback panicked", "queue", e.queue, "panic", fmt.Sprint(r))
		}
	}()
	fn(ctx, s)
}

package patterns

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
)

// ReplayReport counts what a Replay did.
type ReplayReport struct {
	Moved   int // published to the target, confirmed, and taken off the source
	Skipped int // not matched by the Filter, put back on the source
	Failed  int // could not be moved (unreadable envelope, failed publish, failed SkipMissingBlob check), put back on the source
	Missing int // SkipMissingBlob: its large payload is gone, put back on the source
	Listed  int // DryRun: would have been moved, put back on the source
}

// ReplayOutcome is what a Replay did with one message (ReplayItem).
type ReplayOutcome int

// The outcomes of one message. Every one but ReplayMoved leaves the
// message on the source queue.
const (
	ReplayMoved       ReplayOutcome = iota + 1 // published to the target, confirmed, then acked on the source
	ReplayListed                               // DryRun: it would have been moved
	ReplaySkipped                              // the Filter refused it
	ReplayMissingBlob                          // SkipMissingBlob: its large payload is gone
	ReplayFailed                               // it could not be moved; Err says why
)

// String names the outcome as a report would: "moved", "would move",
// "skipped", "missing blob" or "failed".
func (o ReplayOutcome) String() string {
	switch o {
	case ReplayMoved:
		return "moved"
	case ReplayListed:
		return "would move"
	case ReplaySkipped:
		return "skipped"
	case ReplayMissingBlob:
		return "missing blob"
	case ReplayFailed:
		return "failed"
	}
	return fmt.Sprintf("ReplayOutcome(%d)", int(o))
}

// ReplayItem is one message a Replay took off the source and what it did
// with it, as the function given to Each sees it.
type ReplayItem struct {
	ID, Type string
	Key      string // the ordering key, "" when it has none
	Reason   string // the envelope's Error as it sat on the source: why it was dead-lettered or parked
	// Exchange and RoutingKey are where it is (or, in a DryRun, would be)
	// published: "" and the target queue, or an ordered target's exchange
	// and "" (the exchange routes by Key).
	Exchange, RoutingKey string
	Outcome              ReplayOutcome
	Missing              string // ReplayMissingBlob: what the SkipMissingBlob check said is gone
	Err                  error  // ReplayFailed: why
}

// ReplayOption configures Replay.
type ReplayOption interface{ applyReplay(*replayConfig) }

type replayOptionFunc func(*replayConfig)

func (f replayOptionFunc) applyReplay(c *replayConfig) { f(c) }

type replayConfig struct {
	filter   func(*acemq.Envelope) bool
	progress func(ReplayReport)
	each     func(ReplayItem)
	gone     func(ctx context.Context, contentType string, body []byte) (string, error)
	dryRun   bool
	limit    int
	interval time.Duration
}

// Each calls fn with every message the replay took off the source, once
// its outcome is known (moved, listed, skipped, missing or failed), on the
// replay's goroutine and before Progress; fn must be quick. A tool uses it
// to list what a DryRun would move or which messages SkipMissingBlob left.
// A nil fn is ignored.
func Each(fn func(ReplayItem)) ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.each = fn })
}

// DryRun makes Replay move nothing: each message the Filter (and
// SkipMissingBlob) would let through is counted Listed and reported to
// Each with the exchange and routing key it would be published to, and
// nothing is published or acked. Every message taken is held unacked until
// the replay ends and then returned to the source, last first, so the
// source keeps its messages and their order (each is marked redelivered;
// on a quorum queue with a delivery limit, each return counts as a
// delivery). Limit counts Listed messages in a dry run.
func DryRun() ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.dryRun = true })
}

// SkipMissingBlob leaves on the source every message whose large payload
// is gone. gone is asked about each message the Filter accepted, with its
// content type and body, before it is moved: it returns a description of
// what the message names that no longer exists (such as "object 3f2a…,
// 2000 bytes"), or "" when the message names nothing of the kind or what
// it names is there. A message with something gone is counted Missing,
// reported to Each with that description, and put back on the source with
// the skipped ones, where it waits for its object to be restored or for
// the queue to be purged; the others are replayed. An error from gone
// counts the message Failed (it stays on the source too). blob.Missing(store)
// is gone for the objects of a blob store (claim checks and blob.Publisher
// Refs). A nil gone checks nothing, the default.
func SkipMissingBlob(gone func(ctx context.Context, contentType string, body []byte) (string, error)) ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.gone = gone })
}

// Progress calls fn with the counts so far after each message the replay
// took, on the replay's goroutine; fn must be quick. A tool uses it to
// report a long replay while it runs. A nil fn is ignored.
func Progress(fn func(ReplayReport)) ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.progress = fn })
}

// Filter moves only the messages fn accepts; the others stay on the source
// queue (counted Skipped). fn sees each envelope as it sits there, Error
// and Attempt included. A nil fn accepts every message.
func Filter(fn func(*acemq.Envelope) bool) ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.filter = fn })
}

// Limit stops the replay after n messages were moved. Zero or less means
// no limit (the default): the replay runs until the source is empty.
func Limit(n int) ReplayOption {
	return replayOptionFunc(func(c *replayConfig) { c.limit = max(n, 0) })
}

// Rate paces the replay to at most perSecond moves a second, so a backlog
// does not land on the consumers at once. Zero or less means as fast as
// the broker confirms (the default).
func Rate(perSecond float64) ReplayOption {
	return replayOptionFunc(func(c *replayConfig) {
		c.interval = 0
		if perSecond > 0 {
			c.interval = time.Duration(float64(time.Second) / perSecond)
		}
	})
}

// moveTimeout bounds the move of one message once it has been taken, even
// when ctx has ended: a move is finished, not abandoned half way.
const moveTimeout = 30 * time.Second

// Replay moves messages from the queue from, typically a {queue}.dlq or
// {queue}.parked, to the queue to, through the default exchange; when to
// is an ordered consumer's queue (see OrderedTarget), through its exchange
// named to, which routes each message by its key to the key's partition,
// behind the messages of the key already there. Each is
// published with the envelope it had, its ID, headers and trace context
// (traceparent) kept so its trace stays linked, but with Attempt reset to
// 1 and Error cleared, so it climbs the retry ladder afresh. It goes
// through Conn.PublishRaw (no interceptors) and only once the broker
// confirmed the copy is the original acked: a message is never lost, and
// at worst (a failure between the confirm and the ack) it is in both
// queues.
//
// Messages the Filter refuses, those whose large payload is gone
// (SkipMissingBlob), those a DryRun only lists and those that cannot be
// moved are held unacked until the replay ends and then returned to from,
// in their order; holding them is what lets the replay go past them. Replay stops when from
// is empty, when Limit is reached or when ctx ends; ctx is checked between
// messages, and a message already taken is moved or put back, never
// dropped. It returns ctx's error when ctx ended it, and an error naming
// the first failure when some messages could not be moved.
func Replay(ctx context.Context, c *acemq.Conn, from, to string, opts ...ReplayOption) (ReplayReport, error) {
	var rep ReplayReport
	switch {
	case c == nil:
		return rep, errors.New("patterns: Replay was given a nil Conn")
	case from == "" || to == "":
		return rep, fmt.Errorf("patterns: replay from %q to %q: both queues must be named", from, to)
	case from == to:
		return rep, fmt.Errorf("patterns: replay from %q to itself would never end", from)
	}
	var cfg replayConfig
	for _, o := range opts {
		if o != nil {
			o.applyReplay(&cfg)
		}
	}
	t := c.Transport()
	ordered, err := OrderedTarget(ctx, t, to)
	if err != nil {
		return rep, fmt.Errorf("patterns: replay to %q: %w", to, err)
	}
	r := replayer{c: c, t: t, from: from, to: to, cfg: &cfg}
	if ordered {
		r.exchange = to
	}
	defer r.putBack()
	next := time.Now()
	for cfg.limit == 0 || rep.Moved+rep.Listed < cfg.limit {
		if cfg.interval > 0 {
			if err := sleepUntil(ctx, next); err != nil {
				return rep, err
			}
			next = time.Now().Add(cfg.interval)
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		d, ok, err := t.Get(ctx, from)
		if err != nil {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			return rep, fmt.Errorf("patterns: replay from %q: %w", from, err)
		}
		if !ok {
			break
		}
		r.one(ctx, d, &rep)
		if cfg.progress != nil {
			cfg.progress(rep)
		}
	}
	if r.firstErr != nil {
		return rep, fmt.Errorf("patterns: replay from %q to %q: %d messages could not be moved and stay on %q; the first: %w",
			from, to, rep.Failed, from, r.firstErr)
	}
	return rep, nil
}

// OrderedTarget reports whether name is an ordered consumer's queue: no
// queue has the name, and its first partition, {name}.p0, exists (an
// ordered consumer declares an exchange named name and the partitions
// {name}.p0 ... behind it). A plain queue named name is not ordered
// whatever else exists. When neither exists the error is the one looking
// for name met, wrapping transport.ErrNotFound.
func OrderedTarget(ctx context.Context, t transport.Transport, name string) (bool, error) {
	_, err := t.Inspect(ctx, name)
	if err == nil || !errors.Is(err, transport.ErrNotFound) {
		return false, err
	}
	if _, perr := t.Inspect(ctx, name+".p0"); perr == nil {
		return true, nil
	}
	return false, err
}

// replayer is the state of one Replay.
type replayer struct {
	c        *acemq.Conn
	t        transport.Transport
	from, to string
	exchange string // to's exchange when to is an ordered queue, else "" (the default exchange)
	cfg      *replayConfig
	held     []transport.Delivery // skipped or failed, returned at the end
	firstErr error
}

// one moves or holds the delivery d, and reports it to Each.
func (r *replayer) one(ctx context.Context, d transport.Delivery, rep *ReplayReport) {
	item := ReplayItem{ID: d.MessageID, Type: d.Type, RoutingKey: r.to}
	if r.exchange != "" {
		// The x-consistent-hash exchange routes by the envelope's key
		// (header x-acemq-key), not by the routing key.
		item.Exchange, item.RoutingKey = r.exchange, ""
	}
	r.settle(ctx, d, rep, &item)
	if r.cfg.each != nil {
		r.cfg.each(item)
	}
}

// settle decides the outcome of d, recording it in item and rep.
func (r *replayer) settle(ctx context.Context, d transport.Delivery, rep *ReplayReport, item *ReplayItem) {
	env, err := acemq.EnvelopeOf(d.Message)
	if err != nil {
		r.fail(d, rep, item, fmt.Errorf("message %s has an unreadable envelope: %w", env.ID, err))
		return
	}
	item.ID, item.Type, item.Key, item.Reason = env.ID, env.Type, env.Key, env.Error
	if r.cfg.filter != nil && !r.cfg.filter(env) {
		r.hold(d, &rep.Skipped, item, ReplaySkipped)
		return
	}
	// A message taken is finished (moved or held) even when ctx has ended.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	if r.cfg.gone != nil {
		what, err := r.cfg.gone(mctx, d.ContentType, d.Body)
		switch {
		case err != nil:
			r.fail(d, rep, item, fmt.Errorf("message %s: looking for its large payload: %w", env.ID, err))
			return
		case what != "":
			item.Missing = what
			r.hold(d, &rep.Missing, item, ReplayMissingBlob)
			return
		}
	}
	if r.cfg.dryRun {
		r.hold(d, &rep.Listed, item, ReplayListed)
		return
	}
	env.Attempt, env.Error = 1, ""
	// The copy confirmed, then the original acked, as the engine moves a
	// delivery. An ack that fails leaves the original to come back to from:
	// a duplicate, not a loss.
	m := acemq.RawMessage{Exchange: item.Exchange, RoutingKey: item.RoutingKey, Envelope: env, Body: d.Body, ContentType: d.ContentType}
	if err := r.c.PublishRaw(mctx, m); err != nil {
		r.fail(d, rep, item, err)
		return
	}
	_ = d.Ack()
	rep.Moved++
	item.Outcome = ReplayMoved
}

// hold keeps d for putBack, counting it in n.
func (r *replayer) hold(d transport.Delivery, n *int, item *ReplayItem, o ReplayOutcome) {
	r.held = append(r.held, d)
	*n++
	item.Outcome = o
}

func (r *replayer) fail(d transport.Delivery, rep *ReplayReport, item *ReplayItem, err error) {
	r.hold(d, &rep.Failed, item, ReplayFailed)
	item.Err = err
	if r.firstErr == nil {
		r.firstErr = err
	}
}

// putBack returns the held deliveries to from, last first, so that each
// goes back to the head in front of the one after it and the queue keeps
// its order.
func (r *replayer) putBack() {
	for i := len(r.held) - 1; i >= 0; i-- {
		_ = r.held[i].Nack(true)
	}
	r.held = nil
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
	"github.com/acemq/acemq/transport"
)

// The audit headers an edited message carries.
const (
	HeaderEditedBy = "x-acemq-edited-by"
	HeaderEditedAt = "x-acemq-edited-at"
)

// replayRequest is what replay moves: the messages IDs names, else the
// group Type and Reason name, else (All) the whole queue.
type replayRequest struct {
	Queue  string   `json:"queue"`
	IDs    []string `json:"ids"`
	Group  bool     `json:"group"`
	Type   string   `json:"type"`
	Reason string   `json:"reason"`
	All    bool     `json:"all"`
	Rate   float64  `json:"rate"` // messages a second, 0 as fast as confirmed
}

// progressEvery is how often, in messages, replay reports its progress.
const progressEvery = 100

// replay moves messages back to the work queue with patterns.Replay, the
// code acemq replay runs, and streams its progress as JSON lines.
func (c *console) replay(w http.ResponseWriter, r *http.Request) {
	var req replayRequest
	if err := decodeBody(r, &req); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	to, err := deadQueue(req.Queue)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	var filter func(*acemq.Envelope) bool
	var limit int
	switch {
	case req.Rate < 0:
		fail(w, http.StatusBadRequest, errors.New("acemq: console: replay: the rate must not be negative"))
		return
	case len(req.IDs) > 0:
		ids := map[string]bool{}
		for _, id := range req.IDs {
			ids[id] = true
		}
		filter, limit = func(e *acemq.Envelope) bool { return ids[e.ID] }, len(ids)
	case req.Group:
		filter = func(e *acemq.Envelope) bool { return e.Type == req.Type && e.Error == req.Reason }
	case req.All:
	default:
		fail(w, http.StatusBadRequest, errors.New("acemq: console: replay: say which messages: ids, a group (type and reason) or all"))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	opts := []patterns.ReplayOption{patterns.Filter(filter), patterns.Limit(limit), patterns.Rate(req.Rate),
		patterns.Progress(func(p patterns.ReplayReport) {
			if n := p.Moved + p.Skipped + p.Failed; n%progressEvery == 0 {
				_ = enc.Encode(map[string]any{"moved": p.Moved, "skipped": p.Skipped, "failed": p.Failed})
				_ = rc.Flush()
			}
		})}
	if filter == nil {
		opts = opts[1:]
	}
	rep, err := patterns.Replay(r.Context(), c.conn, req.Queue, to, opts...)
	end := map[string]any{"done": true, "moved": rep.Moved, "skipped": rep.Skipped, "failed": rep.Failed, "to": to}
	if err != nil {
		end["error"] = err.Error()
	}
	c.cfg.logger.Info("acemq: console: replay", "who", c.who(r), "from", req.Queue, "to", to, "moved", rep.Moved, "failed", rep.Failed, "error", err)
	_ = enc.Encode(end)
}

// take reads queue, finds the message id in it and gives it to fn: when
// fn returns nil the message is acked (fn has moved it, or it is
// discarded), otherwise it is put back where it was. Every other message
// read is put back, in order. found is false when queue holds no such
// message among its first maxBrowse.
func (c *console) take(ctx context.Context, queue, id string, fn func(transport.Delivery) error) (found bool, err error) {
	count, err := c.ready(ctx, queue)
	if err != nil {
		return false, err
	}
	r, err := c.read(ctx, queue, count)
	if err != nil {
		return false, err
	}
	defer r.end()
	i := slices.IndexFunc(r.held, func(d transport.Delivery) bool { return d.MessageID == id })
	for j, d := range r.held {
		if j != i {
			_ = d.Nack(true)
		}
	}
	if i < 0 {
		return false, nil
	}
	target := r.held[i]
	if ferr := fn(target); ferr != nil {
		_ = target.Nack(true)
		return true, ferr
	}
	if aerr := target.Ack(); aerr != nil {
		// Moved and not acked: the broker gives it back to queue, so it is
		// in both queues, a duplicate and not a loss.
		return true, fmt.Errorf("acemq: console: message %s was handled but could not be acked on %s, where it comes back: %w", id, queue, aerr)
	}
	return true, nil
}

type editRequest struct {
	Queue string `json:"queue"`
	ID    string `json:"id"`
	Body  string `json:"body"`
}

// edit replays one message with a new body: checked by its type's Check
// (or as JSON), published to the work queue with audit headers and
// confirmed before the original leaves the dead-letter queue.
func (c *console) edit(w http.ResponseWriter, r *http.Request) {
	var req editRequest
	if err := decodeBody(r, &req); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	to, err := deadQueue(req.Queue)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	body := []byte(req.Body)
	who, at := c.who(r), time.Now().UTC()
	var changed []string
	found, err := c.take(r.Context(), req.Queue, req.ID, func(d transport.Delivery) error {
		env, err := acemq.EnvelopeOf(d.Message)
		if err != nil {
			return fmt.Errorf("acemq: console: message %s has an unreadable envelope: %w", req.ID, err)
		}
		if key, sealed := env.Reserved()[acemq.CipherHeader]; sealed {
			return errBadInput{fmt.Errorf("acemq: console: message %s is sealed (key %v): the console does not seal, so it cannot edit it; replay sends it on as it is", req.ID, key)}
		}
		if err := c.checkBody(env.Type, body); err != nil {
			return errBadInput{err}
		}
		changed = changedFields(d.Body, body)
		env.Attempt, env.Error = 1, ""
		if err := env.SetReserved(HeaderEditedBy, who); err != nil {
			return errBadInput{fmt.Errorf("acemq: console: the operator's name: %w", err)}
		}
		if err := env.SetReserved(HeaderEditedAt, at.Format(time.RFC3339)); err != nil {
			return err
		}
		m := acemq.RawMessage{RoutingKey: to, Envelope: env, Body: body, ContentType: d.ContentType}
		ordered, err := patterns.OrderedTarget(r.Context(), c.conn.Transport(), to)
		if err != nil {
			return fmt.Errorf("acemq: console: the target queue %s: %w", to, err)
		}
		if ordered {
			m.Exchange, m.RoutingKey = to, ""
		}
		c.cfg.logger.Info("acemq: console: edit and replay", "who", who, "at", at, "id", req.ID, "type", env.Type,
			"from", req.Queue, "to", to, "changed", changed, "old_sha256", digest(d.Body), "new_sha256", digest(body))
		return c.conn.PublishRaw(r.Context(), m)
	})
	switch {
	case errors.As(err, new(errBadInput)):
		fail(w, http.StatusBadRequest, err)
	case err != nil:
		fail(w, statusOf(err), err)
	case !found:
		fail(w, http.StatusNotFound, fmt.Errorf("acemq: console: no message %q in %s", req.ID, req.Queue))
	default:
		reply(w, map[string]any{"replayed": req.ID, "to": to, "changed": changed, "editedBy": who})
	}
}

// errBadInput is an edit refused for what it asks, not for the broker.
type errBadInput struct{ err error }

func (e errBadInput) Error() string { return e.err.Error() }
func (e errBadInput) Unwrap() error { return e.err }

// checkBody checks an edited body of type typ.
func (c *console) checkBody(typ string, body []byte) error {
	if fn, ok := c.cfg.checks[typ]; ok {
		if err := fn(body); err != nil {
			return fmt.Errorf("acemq: console: the edited body does not decode as %s: %w", typ, err)
		}
		return nil
	}
	if !json.Valid(body) {
		return fmt.Errorf("acemq: console: the edited body is not valid JSON (no decoder is registered for %s, so only JSON is checked)", typ)
	}
	return nil
}

// changedFields names the top-level fields whose values differ between
// two JSON objects, or says the body as a whole changed.
func changedFields(old, new []byte) []string {
	var a, b map[string]json.RawMessage
	if json.Unmarshal(old, &a) != nil || json.Unmarshal(new, &b) != nil {
		if bytes.Equal(old, new) {
			return []string{}
		}
		return []string{"(whole body)"}
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if nb, ok := b[k]; !ok || !jsonEqual(a[k], nb) {
			out = append(out, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	return append([]string{}, out...)
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

type discardRequest struct {
	Queue  string `json:"queue"`
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// discard acks one message off a dead-letter or parking queue, after a log
// line with who, why and the message's envelope.
func (c *console) discard(w http.ResponseWriter, r *http.Request) {
	var req discardRequest
	if err := decodeBody(r, &req); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	if _, err := deadQueue(req.Queue); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	if req.Reason == "" {
		fail(w, http.StatusBadRequest, errors.New("acemq: console: discard: give a reason; it goes into the log line"))
		return
	}
	found, err := c.take(r.Context(), req.Queue, req.ID, func(d transport.Delivery) error {
		c.cfg.logger.Warn("acemq: console: discard", "who", c.who(r), "id", req.ID, "type", d.Type, "queue", req.Queue,
			"reason", req.Reason, "size", len(d.Body), "sha256", digest(d.Body))
		return nil
	})
	switch {
	case err != nil:
		fail(w, statusOf(err), err)
	case !found:
		fail(w, http.StatusNotFound, fmt.Errorf("acemq: console: no message %q in %s", req.ID, req.Queue))
	default:
		reply(w, map[string]any{"discarded": req.ID})
	}
}

func (c *console) keys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("queue")
	keys, err := acemq.BlockedKeys(r.Context(), c.conn, q)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	if keys == nil {
		keys = []acemq.BlockedKey{}
	}
	reply(w, keys)
}

type releaseRequest struct {
	Queue string `json:"queue"`
	Key   string `json:"key"`
	Mode  string `json:"mode"` // rerun or skip
}

// release releases a blocked key with acemq.ReleaseKey, as acemq keys
// release does.
func (c *console) release(w http.ResponseWriter, r *http.Request) {
	var req releaseRequest
	if err := decodeBody(r, &req); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	var opt acemq.ReleaseOption
	switch req.Mode {
	case "rerun":
		opt = acemq.RerunFailed()
	case "skip":
		opt = acemq.SkipFailed()
	default:
		fail(w, http.StatusBadRequest, fmt.Errorf("acemq: console: release: mode is rerun or skip, not %q", req.Mode))
		return
	}
	if err := acemq.ReleaseKey(r.Context(), c.conn, req.Queue, req.Key, opt); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	c.cfg.logger.Info("acemq: console: release", "who", c.who(r), "queue", req.Queue, "key", req.Key, "mode", req.Mode)
	reply(w, map[string]any{"released": req.Key, "mode": req.Mode})
}

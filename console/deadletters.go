package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/transport"
)

// maxListed bounds the messages listed per group; the group's count and
// its actions cover all of them.
const maxListed = 100

// summary is one message of a group, as the list shows it.
type summary struct {
	ID        string    `json:"id"`
	FirstSeen time.Time `json:"firstSeen,omitzero"`
	Attempt   int       `json:"attempt"`
	Key       string    `json:"key,omitempty"`
}

// group is the messages of one queue with the same type and reason.
type group struct {
	Type      string    `json:"type"`
	Reason    string    `json:"reason"`
	Count     int       `json:"count"`
	FirstSeen time.Time `json:"firstSeen,omitzero"`
	LastSeen  time.Time `json:"lastSeen,omitzero"`
	Messages  []summary `json:"messages"`
}

type groupsReply struct {
	Queue  string `json:"queue"`
	Read   int    `json:"read"`
	Capped bool   `json:"capped,omitempty"`
	// Before and After are the broker's ready counts when the read began
	// and once every message was put back; Changed says they differ from
	// each other or from what was read: messages came or went meanwhile.
	Before  int     `json:"before"`
	After   int     `json:"after"`
	Changed bool    `json:"changed"`
	Groups  []group `json:"groups"`
	Took    string  `json:"took"`
}

// deadQueue checks that q is a .dlq or .parked queue and returns the work
// queue it belongs to.
func deadQueue(q string) (string, error) {
	for _, suffix := range []string{".dlq", ".parked"} {
		if base, ok := strings.CutSuffix(q, suffix); ok && base != "" {
			return base, nil
		}
	}
	return "", fmt.Errorf("acemq: console: %q is not a dead-letter (.dlq) or parking (.parked) queue", q)
}

// browse reads queue, which held count ready messages, gives each message
// to fn in queue order and puts them all back: nothing is acked, and
// nothing stays unacked once browse returns, even when ctx ended half way.
func (c *console) browse(ctx context.Context, queue string, count int, fn func(transport.Delivery)) (read int, capped bool, err error) {
	r, err := c.read(ctx, queue, count)
	if err != nil {
		return 0, false, err
	}
	defer r.putBack()
	for _, d := range r.held {
		fn(d)
	}
	return len(r.held), r.capped, nil
}

// ready is queue's ready count, or an error.
func (c *console) ready(ctx context.Context, queue string) (int, error) {
	info, err := c.conn.Transport().Inspect(ctx, queue)
	if err != nil {
		return 0, fmt.Errorf("acemq: console: %s: %w", queue, err)
	}
	return info.Messages, nil
}

// Groups reads queue and groups its messages by type and reason.
func (c *console) groups(ctx context.Context, queue string) (groupsReply, error) {
	start := time.Now()
	out := groupsReply{Queue: queue, Groups: []group{}}
	before, err := c.ready(ctx, queue)
	if err != nil {
		return out, err
	}
	out.Before = before
	byKey := map[[2]string]*group{}
	out.Read, out.Capped, err = c.browse(ctx, queue, before, func(d transport.Delivery) {
		env, perr := acemq.EnvelopeOf(d.Message)
		reason := env.Error
		if perr != nil {
			reason = "unreadable envelope: " + perr.Error()
		}
		k := [2]string{env.Type, reason}
		g := byKey[k]
		if g == nil {
			g = &group{Type: env.Type, Reason: reason}
			byKey[k] = g
		}
		g.Count++
		if fs := env.FirstSeen; !fs.IsZero() {
			if g.FirstSeen.IsZero() || fs.Before(g.FirstSeen) {
				g.FirstSeen = fs
			}
			if fs.After(g.LastSeen) {
				g.LastSeen = fs
			}
		}
		if len(g.Messages) < maxListed {
			g.Messages = append(g.Messages, summary{ID: env.ID, FirstSeen: env.FirstSeen, Attempt: env.Attempt, Key: env.Key})
		}
	})
	if err != nil {
		return out, err
	}
	if out.After, err = c.settled(ctx, queue, before); err != nil {
		return out, err
	}
	out.Changed = out.Before != out.After || (!out.Capped && out.Read != out.Before)
	for _, k := range slices.SortedFunc(maps.Keys(byKey), func(a, b [2]string) int {
		if n := byKey[b].Count - byKey[a].Count; n != 0 {
			return n
		}
		return strings.Compare(a[0]+a[1], b[0]+b[1])
	}) {
		out.Groups = append(out.Groups, *byKey[k])
	}
	out.Took = time.Since(start).Round(time.Millisecond).String()
	return out, nil
}

func (c *console) deadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("queue")
	if _, err := deadQueue(q); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	out, err := c.groups(r.Context(), q)
	if err != nil {
		fail(w, statusOf(err), err)
		return
	}
	reply(w, out)
}

// statusOf is the HTTP status for err.
func statusOf(err error) int {
	if errors.Is(err, transport.ErrNotFound) {
		return http.StatusNotFound
	}
	return http.StatusBadGateway
}

// detail is one message whole.
type detail struct {
	Queue       string            `json:"queue"`
	ID          string            `json:"id"`
	Type        string            `json:"type"`
	Version     int               `json:"version"`
	Attempt     int               `json:"attempt"`
	FirstSeen   time.Time         `json:"firstSeen,omitzero"`
	Origin      string            `json:"origin"`
	Error       string            `json:"error"`
	Correlation string            `json:"correlationId"`
	Causation   string            `json:"causationId"`
	ReplyTo     string            `json:"replyTo"`
	Key         string            `json:"key"`
	TraceID     string            `json:"traceId"`
	ContentType string            `json:"contentType"`
	Size        int               `json:"size"`
	Headers     map[string]string `json:"headers"`
	Unreadable  string            `json:"unreadable,omitempty"`
	// Body is the body as text (pretty-printed when it is JSON); Binary
	// says it is not UTF-8 and Body is then a hex dump of its start.
	Body   string    `json:"body"`
	JSON   bool      `json:"json"`
	Binary bool      `json:"binary,omitempty"`
	Blob   *blob.Ref `json:"blob,omitempty"`
	Check  string    `json:"check"` // how an edited body will be checked
	// Sealed is the ID of the key a sealed body names (acemq.CipherHeader);
	// Opened says the console's Cipher opened it, and Body is then the
	// opened body. A sealed body not opened shows no byte of it.
	Sealed string `json:"sealed,omitempty"`
	Opened bool   `json:"opened,omitempty"`
}

// maxBinaryShown bounds the bytes of a binary body shown, as hex.
const maxBinaryShown = 4096

// detailOf describes d, read from queue.
func (c *console) detailOf(ctx context.Context, queue string, d transport.Delivery) detail {
	env, perr := acemq.EnvelopeOf(d.Message)
	out := detail{Queue: queue, ID: env.ID, Type: env.Type, Version: env.Version, Attempt: env.Attempt, FirstSeen: env.FirstSeen,
		Origin: env.Origin, Error: env.Error, Correlation: env.CorrelationID, Causation: env.CausationID, ReplyTo: env.ReplyTo,
		Key: env.Key, ContentType: d.ContentType, Size: len(d.Body), Headers: map[string]string{}, Check: c.checkText(env.Type)}
	if perr != nil {
		out.Unreadable = perr.Error()
	}
	for k, v := range d.Headers {
		out.Headers[k] = fmt.Sprint(v)
	}
	if tp, ok := d.Headers["traceparent"].(string); ok {
		if parts := strings.Split(tp, "-"); len(parts) == 4 {
			out.TraceID = parts[1]
		}
	}
	body := d.Body
	if key, ok := env.Reserved()[acemq.CipherHeader].(string); ok {
		out.Sealed = key
		switch {
		case c.cfg.cipher == nil:
			out.Body = fmt.Sprintf("(encrypted with key %s: give the console the keyset to read it)", key)
			return out
		default:
			opened, err := acemq.OpenBody(ctx, c.cfg.cipher, env, d.Body)
			if err != nil {
				out.Body = fmt.Sprintf("(encrypted with key %s, and it does not open: %v)", key, err)
				return out
			}
			body, out.Opened = opened, true
		}
	}
	var pretty bytes.Buffer
	switch {
	case json.Valid(body) && json.Indent(&pretty, body, "", "  ") == nil:
		out.Body, out.JSON = pretty.String(), true
	case utf8.Valid(body):
		out.Body = string(body)
	default:
		out.Binary = true
		out.Body = fmt.Sprintf("% x", body[:min(len(body), maxBinaryShown)])
	}
	if ref, ok := blob.RefOf(d.ContentType, body); ok {
		out.Blob = &ref
	}
	return out
}

// checkText says how an edited body of type typ is checked.
func (c *console) checkText(typ string) string {
	if _, ok := c.cfg.checks[typ]; ok {
		return "decoded as " + typ + " before it is sent"
	}
	return "no decoder registered for " + typ + ": only checked to be valid JSON"
}

func (c *console) message(w http.ResponseWriter, r *http.Request) {
	q, id := r.URL.Query().Get("queue"), r.URL.Query().Get("id")
	if _, err := deadQueue(q); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	var found *detail
	count, err := c.ready(r.Context(), q)
	if err == nil {
		_, _, err = c.browse(r.Context(), q, count, func(d transport.Delivery) {
			if found == nil && d.MessageID == id {
				det := c.detailOf(r.Context(), q, d)
				found = &det
			}
		})
	}
	switch {
	case err != nil:
		fail(w, statusOf(err), err)
	case found == nil:
		fail(w, http.StatusNotFound, fmt.Errorf("acemq: console: no message %q in %s (replayed or discarded meanwhile?)", id, q))
	default:
		reply(w, found)
	}
}

package transporttest

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq/transport"
)

// wantLimit fails the test unless err is an error of the transport's own
// (it begins with Features.ErrorPrefix) that names field and the 255-byte
// limit (or, for a value, what is wrong with it).
func wantLimit(e *env, what string, err error, field, limit string) {
	e.t.Helper()
	switch {
	case err == nil:
		e.t.Errorf("%s = nil; want an error naming %q and %q", what, field, limit)
	case !strings.HasPrefix(err.Error(), e.f.ErrorPrefix):
		e.t.Errorf("%s = %q; want an error beginning %q", what, err, e.f.ErrorPrefix)
	case !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), limit):
		e.t.Errorf("%s = %q; want it to name %q and %q", what, err, field, limit)
	}
}

// stillWorks fails the test unless tr is healthy and confirms a publish
// that reaches q, after whatever was refused.
func stillWorks(e *env, tr transport.Transport, q, id string) {
	e.t.Helper()
	if err := tr.Health(e.ctx()); err != nil {
		e.t.Errorf("Health after the refusals: %v", err)
	}
	e.publish(tr, transport.Message{RoutingKey: q, MessageID: id})
	if ids := e.drainIDs(tr, q); !slices.Equal(ids, []string{id}) {
		e.t.Errorf("queue holds %q; want only %q", ids, id)
	}
}

// testDeclareOverLimits: a name, key or argument the broker would refuse or
// mangle fails Declare with an error naming the field and the limit, and
// declares nothing (a queue is never created without its arguments).
func testDeclareOverLimits(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	long := strings.Repeat("n", 300)
	ex := e.exchange("x", "direct")
	e.t.Cleanup(func() {
		if err := e.admin.DeleteExchange(context.Background(), ex); err != nil {
			e.t.Errorf("DeleteExchange(%q): %v", ex, err)
		}
	})

	argQ := e.name("args")
	err := tr.Declare(e.ctx(), transport.Queue{Name: argQ, Args: map[string]any{"x-message-ttl": int64(1000), long: "v"}})
	wantLimit(e, "a queue argument name of 300 bytes", err, "argument name of 300 bytes", "255")
	if _, ierr := tr.Inspect(e.ctx(), argQ); ierr == nil {
		_ = e.admin.DeleteQueue(e.ctx(), argQ)
		e.t.Errorf("the queue %q was declared although its arguments were refused", argQ)
	}
	err = tr.Declare(e.ctx(), transport.Binding{Exchange: ex, Key: long, Queue: q})
	wantLimit(e, "a binding key of 300 bytes", err, "binding key is 300 bytes", "255")
	err = tr.Declare(e.ctx(), transport.Exchange{Name: e.name(long), Kind: "direct"})
	wantLimit(e, "an exchange name of 300 bytes", err, "exchange name is", "255")
	err = tr.Declare(e.ctx(), transport.Queue{Name: e.name("nan"), Args: map[string]any{"x-message-ttl": math.NaN()}})
	wantLimit(e, "a queue argument of NaN", err, "x-message-ttl", "NaN")
	stillWorks(e, tr, q, "after-declares")
}

// testPublishOverLimits: an exchange or routing key over 255 bytes, a
// non-finite float and a time past year 9999 in the headers fail Publish
// with an error naming the field and the limit; nothing is sent.
func testPublishOverLimits(e *env) {
	tr := e.client()
	q := e.queue("q", nil)
	long := strings.Repeat("k", 300)
	for _, tc := range []struct {
		what         string
		m            transport.Message
		field, limit string
	}{
		{"a routing key of 300 bytes", transport.Message{RoutingKey: long}, "routing key is 300 bytes", "255"},
		{"an exchange name of 300 bytes", transport.Message{Exchange: long, RoutingKey: q}, "exchange name is 300 bytes", "255"},
		{"a message ID of 300 bytes", transport.Message{RoutingKey: q, MessageID: long}, "message ID is 300 bytes", "255"},
		{"a NaN header", transport.Message{RoutingKey: q, Headers: map[string]any{"f": math.NaN()}}, `header "f"`, "NaN"},
		{"an infinite header", transport.Message{RoutingKey: q, Headers: map[string]any{"f": float32(math.Inf(1))}}, `header "f"`, "+Inf"},
		{"a header time in year 10000", transport.Message{RoutingKey: q, Headers: map[string]any{"t": time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}, `header "t"`, "9999"},
	} {
		wantLimit(e, "Publish with "+tc.what, tr.Publish(e.ctx(), tc.m), tc.field, tc.limit)
	}
	if ids := e.drainIDs(tr, q); len(ids) != 0 {
		e.t.Errorf("refused publishes reached the queue: %q", ids)
	}
	stillWorks(e, tr, q, "after-publishes")
}

package patterns_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/patterns"
	"github.com/stretchr/testify/assert"
)

// trace is a middleware that notes when the delivery passes it on the way
// in and the Ack on the way out.
func trace(name string, log *[]string) acemq.Middleware[OrderPlaced] {
	return func(next acemq.Handler[OrderPlaced]) acemq.Handler[OrderPlaced] {
		return func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			*log = append(*log, name+" in")
			ack := next(ctx, m)
			*log = append(*log, name+" out: "+ack.String())
			return ack
		}
	}
}

// The first middleware given is the outermost: it sees the delivery first
// and the Ack last.
func ExampleChain() {
	var log []string
	handle := func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		log = append(log, "handler")
		return acemq.Done()
	}
	h := patterns.Chain(handle, trace("tracing", &log), trace("timeout", &log), trace("idempotency", &log))
	h(context.Background(), &acemq.Message[OrderPlaced]{Envelope: &acemq.Envelope{}})
	for _, line := range log {
		fmt.Println(line)
	}
	// Output:
	// tracing in
	// timeout in
	// idempotency in
	// handler
	// idempotency out: done
	// timeout out: done
	// tracing out: done
}

func TestChain(t *testing.T) {
	t.Parallel()
	done := func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() }
	for _, tc := range []struct {
		name    string
		h       acemq.Handler[OrderPlaced]
		mws     func(log *[]string) []acemq.Middleware[OrderPlaced]
		wantLog []string
		wantAck string
	}{
		{"no middleware", done, func(*[]string) []acemq.Middleware[OrderPlaced] { return nil }, nil, "done"},
		{"nil middleware are skipped", done, func(log *[]string) []acemq.Middleware[OrderPlaced] {
			return []acemq.Middleware[OrderPlaced]{nil, trace("a", log), nil}
		}, []string{"a in", "a out: done"}, "done"},
		{"a middleware may answer without the handler", done, func(log *[]string) []acemq.Middleware[OrderPlaced] {
			stop := func(acemq.Handler[OrderPlaced]) acemq.Handler[OrderPlaced] {
				return func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Reject(errors.New("no")) }
			}
			return []acemq.Middleware[OrderPlaced]{trace("a", log), stop, trace("b", log)}
		}, []string{"a in", "a out: reject"}, "reject"},
		{"a nil handler rejects", nil, func(*[]string) []acemq.Middleware[OrderPlaced] { return nil }, nil, "reject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var log []string
			ack := patterns.Chain(tc.h, tc.mws(&log)...)(context.Background(), &acemq.Message[OrderPlaced]{Envelope: &acemq.Envelope{}})
			assert.Equal(t, tc.wantAck, ack.String())
			assert.Equal(t, tc.wantLog, log)
		})
	}
}

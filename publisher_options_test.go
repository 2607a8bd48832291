package acemq_test

import (
	"bytes"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPublisherOptionsRefuseWhatCannotBe: an invalid or misplaced
// publisher option fails the way a consumer's does, naming the option and
// its value, and since NewPublisher returns no error, every Send, SendAll
// and Prepare of the publisher fails with that error (nothing is sent) and
// the Conn logs it once, at Error, when the publisher is made. The edge
// values that are valid publish.
func TestPublisherOptionsRefuseWhatCannotBe(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 256)
	for _, tc := range []struct {
		name string
		opts []acemq.PublisherOption
		raw  bool
		want string // the whole error; empty for a valid publisher
		warn string // a warning NewPublisher logs for a valid publisher
	}{
		{name: "SchemaVersion 0", opts: []acemq.PublisherOption{acemq.SchemaVersion(0)},
			want: "acemq: the publisher of OrderPlaced was given SchemaVersion(0): want 1 to 2147483647"},
		{name: "SchemaVersion negative", opts: []acemq.PublisherOption{acemq.SchemaVersion(-3)},
			want: "acemq: the publisher of OrderPlaced was given SchemaVersion(-3): want 1 to 2147483647"},
		{name: "SchemaVersion over int32", opts: []acemq.PublisherOption{acemq.SchemaVersion(math.MaxInt32 + 1)},
			want: "acemq: the publisher of OrderPlaced was given SchemaVersion(2147483648): want 1 to 2147483647"},
		{name: "SchemaVersion 1", opts: []acemq.PublisherOption{acemq.SchemaVersion(1)}},
		{name: "SchemaVersion at int32's top", opts: []acemq.PublisherOption{acemq.SchemaVersion(math.MaxInt32)}},
		{name: "empty TypeName", opts: []acemq.PublisherOption{acemq.TypeName("")},
			want: "acemq: the publisher of OrderPlaced was given an empty TypeName"},
		{name: "long TypeName", opts: []acemq.PublisherOption{acemq.TypeName(long)},
			want: "acemq: the publisher of OrderPlaced was given a TypeName of 256 bytes; a type has at most 255"},
		{name: "TypeName of 255 bytes", opts: []acemq.PublisherOption{acemq.TypeName(long[:255])}},
		{name: "ContentType on a typed publisher, ignored", opts: []acemq.PublisherOption{acemq.ContentType("application/xml")},
			warn: "ContentType is for a Publisher[Raw]; this publisher writes its codec's content type"},
		{name: "empty ContentType", raw: true, opts: []acemq.PublisherOption{acemq.ContentType("")},
			want: "acemq: the publisher of Raw was given an empty ContentType"},
		{name: "long ContentType", raw: true, opts: []acemq.PublisherOption{acemq.ContentType(long)},
			want: "acemq: the publisher of Raw was given a ContentType of 256 bytes; a content type has at most 255"},
		{name: "ContentType on a raw publisher", raw: true, opts: []acemq.PublisherOption{acemq.ContentType("text/plain")}},
		{name: "nil KeyBy", opts: []acemq.PublisherOption{acemq.KeyBy[OrderPlaced](nil)},
			want: "acemq: the publisher of OrderPlaced was given a nil KeyBy for OrderPlaced"},
		{name: "two at once", opts: []acemq.PublisherOption{acemq.SchemaVersion(0), acemq.KeyBy(func(Deposited) string { return "" })},
			want: "acemq: the publisher of OrderPlaced was given SchemaVersion(0): want 1 to 2147483647\nKeyBy for Deposited: KeyBy's function must take the publisher's type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			c := connect(t, acemq.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			q := declareQueue(t, c)
			var errs []error
			if tc.raw {
				pub := acemq.NewPublisher[acemq.Raw](c, "", q, tc.opts...)
				_, prepErr := pub.Prepare(ctxT(t), acemq.Raw("x"))
				errs = []error{pub.Send(ctxT(t), acemq.Raw("x")), pub.SendAll(ctxT(t), []acemq.Raw{acemq.Raw("y")})[0].Err, prepErr}
			} else {
				pub := acemq.NewPublisher[OrderPlaced](c, "", q, tc.opts...)
				_, prepErr := pub.Prepare(ctxT(t), OrderPlaced{})
				errs = []error{pub.Send(ctxT(t), OrderPlaced{}), pub.SendAll(ctxT(t), []OrderPlaced{{}})[0].Err, prepErr}
			}
			if tc.want == "" {
				for _, err := range errs {
					require.NoError(t, err)
				}
				take(t, c, q)
				take(t, c, q)
				if tc.warn != "" {
					assert.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), logs.String())
					assert.Contains(t, logs.String(), tc.warn)
					return
				}
				assert.Empty(t, logs.String())
				return
			}
			for i, err := range errs {
				assert.EqualError(t, err, tc.want, "call %d", i)
			}
			empty(t, c, q)
			assert.Equal(t, 1, strings.Count(logs.String(), "level=ERROR"), logs.String())
			assert.Contains(t, logs.String(), `msg="acemq: a publisher was given an invalid option; every Send fails"`)
		})
	}
}

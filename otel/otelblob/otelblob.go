// Package otelblob traces large payloads (package blob) with the Tracing of
// package otel: a traced Store, whose Put and Open open spans under
// whatever span ctx carries, and a traced blob Publisher, whose publish span
// holds the Put. On the consuming side, otel.Handle (or otel.Middleware)
// around blob.Handle over Store(t, s) puts the Open, which lasts as long as
// the handler reads, under the process span:
//
//	h := otel.Handle(t, queue, blob.Handle(otelblob.Store(t, s), handler))
//
// It is a package of its own so that a service importing otel without blob
// links no blob code.
package otelblob

import (
	"context"
	"io"
	"iter"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/otel"
)

var (
	keyObjectID   = attribute.Key("acemq.blob.id")
	keyObjectSize = attribute.Key("acemq.blob.size")
	keyOffset     = attribute.Key("acemq.blob.offset")
	keyBytesRead  = attribute.Key("acemq.blob.read")
)

// Store returns s with a span around every Put ("blob put", with the
// object's ID and size) and every read ("blob open", from Open until the
// reader is closed, with the offset and the bytes read), each a child of
// ctx's span. Delete and Expired are not traced.
func Store(t *otel.Tracing, s blob.Store) blob.Store {
	if t == nil {
		t = otel.New()
	}
	return &tracedStore{t: t, s: s}
}

type tracedStore struct {
	t *otel.Tracing
	s blob.Store
}

func (s *tracedStore) Put(ctx context.Context, id string, r io.Reader, expires time.Time) (blob.Info, error) {
	ctx, span := s.t.Tracer().Start(ctx, "blob put", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(keyObjectID.String(id)))
	defer span.End()
	info, err := s.s.Put(ctx, id, r, expires)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return info, err
	}
	span.SetAttributes(keyObjectSize.Int64(info.Size))
	return info, nil
}

func (s *tracedStore) Open(ctx context.Context, id string, offset int64) (io.ReadCloser, error) {
	ctx, span := s.t.Tracer().Start(ctx, "blob open", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(keyObjectID.String(id), keyOffset.Int64(offset)))
	rc, err := s.s.Open(ctx, id, offset)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return nil, err
	}
	return &tracedReader{rc: rc, span: span}, nil
}

func (s *tracedStore) Delete(ctx context.Context, id string) error { return s.s.Delete(ctx, id) }

func (s *tracedStore) Expired(ctx context.Context, before time.Time) iter.Seq2[string, error] {
	return s.s.Expired(ctx, before)
}

type tracedReader struct {
	rc   io.ReadCloser
	span trace.Span
	n    int64
}

func (r *tracedReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	r.n += int64(n)
	if err != nil && err != io.EOF {
		r.span.RecordError(err)
	}
	return n, err
}

func (r *tracedReader) Close() error {
	err := r.rc.Close()
	r.span.SetAttributes(keyBytesRead.Int64(r.n))
	r.span.End()
	return err
}

// Publisher is a blob.Publisher whose every Send runs inside a producer
// span, "publish <destination>", holding the store's Put and the publish of
// the small message. It is safe for concurrent use.
type Publisher[M any] struct {
	t        *otel.Tracing
	inner    *blob.Publisher[M]
	exchange string
	key      string
}

// NewPublisher returns a traced blob.Publisher of M storing in Store(t, s);
// the options are blob.NewPublisher's. As with otel.NewPublisher, the trace
// context reaches the wire only when the Conn has t's PublishInterceptor.
func NewPublisher[M any](t *otel.Tracing, c *acemq.Conn, s blob.Store, exchange, key string, opts ...blob.Option) *Publisher[M] {
	if t == nil {
		t = otel.New()
	}
	if s != nil {
		s = Store(t, s)
	}
	return &Publisher[M]{t: t, inner: blob.NewPublisher[M](c, s, exchange, key, opts...), exchange: exchange, key: key}
}

// Send is blob.Publisher.Send inside the publish span, which ends with its
// result (an error status when it failed).
func (p *Publisher[M]) Send(ctx context.Context, meta M, body io.Reader, opts ...acemq.SendOption) (blob.Ref, error) {
	ctx, end := p.t.StartPublish(ctx, p.exchange, p.key)
	ref, err := p.inner.Send(ctx, meta, body, opts...)
	if err == nil {
		trace.SpanFromContext(ctx).SetAttributes(keyObjectID.String(ref.ID), keyObjectSize.Int64(ref.Size))
	}
	end("", err)
	return ref, err
}

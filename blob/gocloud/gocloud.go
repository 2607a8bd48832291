// Package gocloud is a blob.Store over a gocloud.dev/blob bucket: Amazon
// S3, Google Cloud Storage, Azure Blob Storage, a local directory
// (fileblob) or memory (memblob), whichever driver the application opens
// the bucket with.
//
// It is a module of its own, github.com/acemq/acemq/blob/gocloud, so that
// the cloud SDKs gocloud.dev brings never enter the acemq module: only the
// programs that import this package pay for them.
//
//	bucket, err := blob.OpenBucket(ctx, "s3://my-bucket?region=eu-west-1")
//	...
//	store := gocloud.Bucket(bucket, gocloud.Prefix("payloads/"))
//
// # The objects
//
// Each object is stored under the key Prefix + ID, with its bytes as they
// were put and its expiry in the object's metadata (acemq-expires, RFC 3339
// in UTC; absent when it never expires). A Put streams through the
// bucket's Writer and aborts it (cancels its ctx) on any failure, so that
// the bucket never commits a partial object: the drivers make an object
// visible only when its Writer closes without error.
//
// Expired lists the keys under the prefix and reads each one's attributes:
// an object without the acemq-expires metadata (one that never expires,
// or one this package did not write) is never listed, so Sweep never
// deletes it.
//
// # Drivers
//
// Any driver serves; acemq tests the store with fileblob and memblob. Note
// that fileblob, meant for development, rewrites an object's metadata
// sidecar in place, so a read racing with a Put of the same ID may fail
// (never return wrong bytes); acemq gives every payload its own ID, so
// Send does not race this way.
//
// # What it never does
//
// The store never closes the bucket, never changes its configuration and
// never sets lifecycle rules: the bucket is the application's. Delete the
// expired objects with blob.Sweep (or let a lifecycle rule of your own do
// it, if it is longer than every expiry you set).
package gocloud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq/blob"
	gcblob "gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// MetadataExpires is the metadata key that holds an object's expiry.
const MetadataExpires = "acemq-expires"

// Option configures Bucket.
type Option func(*store)

// Prefix puts every object under keys starting with p (say "payloads/"),
// so that the store shares a bucket with other objects and Expired lists
// only its own. The default is no prefix.
func Prefix(p string) Option { return func(s *store) { s.prefix = p } }

// Bucket returns a blob.Store over b. The store never closes b or changes
// its settings; close it yourself when every user of the store is done.
// A nil b gives a store whose every method returns an error.
func Bucket(b *gcblob.Bucket, opts ...Option) blob.Store {
	s := &store{b: b}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s
}

type store struct {
	b      *gcblob.Bucket
	prefix string
}

// key returns the bucket key of id, or an error when id cannot be one.
func (s *store) key(id string) (string, error) {
	switch {
	case s.b == nil:
		return "", errors.New("blob/gocloud: the store was given a nil *blob.Bucket")
	case id == "":
		return "", fmt.Errorf("blob/gocloud: %w: it is empty", blob.ErrInvalidID)
	case !utf8.ValidString(id):
		return "", fmt.Errorf("blob/gocloud: %w: %q is not valid UTF-8, which bucket keys must be", blob.ErrInvalidID, id)
	}
	return s.prefix + id, nil
}

func (s *store) Put(ctx context.Context, id string, r io.Reader, expires time.Time) (blob.Info, error) {
	key, err := s.key(id)
	if err != nil {
		return blob.Info{}, err
	}
	if r == nil {
		return blob.Info{}, fmt.Errorf("blob/gocloud: put %q: nil reader", id)
	}
	info, err := s.put(ctx, key, id, r, expires)
	if err != nil {
		return blob.Info{}, fmt.Errorf("blob/gocloud: put %q: %w", id, err)
	}
	return info, nil
}

func (s *store) put(ctx context.Context, key, id string, r io.Reader, expires time.Time) (blob.Info, error) {
	if err := ctx.Err(); err != nil {
		return blob.Info{}, err
	}
	opts := &gcblob.WriterOptions{
		ContentType:                 "application/octet-stream",
		DisableContentTypeDetection: true,
	}
	if !expires.IsZero() {
		opts.Metadata = map[string]string{MetadataExpires: expires.UTC().Format(time.RFC3339Nano)}
	}
	// Cancelling wctx before Close is how a gocloud Writer is aborted.
	wctx, abort := context.WithCancel(ctx)
	defer abort()
	w, err := s.b.NewWriter(wctx, key, opts)
	if err != nil {
		return blob.Info{}, err
	}
	h := newHasher()
	n, err := blob.CopyContext(ctx, io.MultiWriter(w, h), r)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		abort()
		_ = w.Close()
		return blob.Info{}, err
	}
	if err := w.Close(); err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%v)", cerr, err)
		}
		return blob.Info{}, err
	}
	return h.info(id, n), nil
}

func (s *store) Open(ctx context.Context, id string, offset int64) (io.ReadCloser, error) {
	key, err := s.key(id)
	if err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("blob/gocloud: open %q: negative offset %d", id, offset)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	attrs, err := s.b.Attributes(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("%w: %q", blob.ErrNotFound, id)
	}
	if err != nil {
		return nil, s.wrap(ctx, "open", id, err)
	}
	exp, err := expiry(attrs.Metadata)
	if err != nil {
		return nil, fmt.Errorf("blob/gocloud: open %q: %w", id, err)
	}
	if !exp.IsZero() && exp.Before(time.Now()) {
		return nil, fmt.Errorf("%w: %q", blob.ErrNotFound, id)
	}
	if offset >= attrs.Size {
		return blob.NewContextReader(ctx, strings.NewReader(""), nil), nil
	}
	rd, err := s.b.NewRangeReader(ctx, key, offset, -1, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("%w: %q", blob.ErrNotFound, id)
	}
	if err != nil {
		return nil, s.wrap(ctx, "open", id, err)
	}
	return blob.NewContextReader(ctx, rd, rd), nil
}

func (s *store) Delete(ctx context.Context, id string) error {
	key, err := s.key(id)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err = s.b.Delete(ctx, key)
	if err == nil || gcerrors.Code(err) == gcerrors.NotFound {
		return nil
	}
	return s.wrap(ctx, "delete", id, err)
}

// listPage is how many keys Expired lists per request.
const listPage = 1000

func (s *store) Expired(ctx context.Context, before time.Time) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if s.b == nil {
			yield("", errors.New("blob/gocloud: the store was given a nil *blob.Bucket"))
			return
		}
		token := gcblob.FirstPageToken
		for {
			if err := ctx.Err(); err != nil {
				yield("", err)
				return
			}
			objs, next, err := s.b.ListPage(ctx, token, listPage, &gcblob.ListOptions{Prefix: s.prefix})
			if err != nil {
				yield("", s.wrap(ctx, "list", s.prefix+"*", err))
				return
			}
			for _, o := range objs {
				if o.IsDir {
					continue
				}
				if err := ctx.Err(); err != nil {
					yield("", err)
					return
				}
				attrs, err := s.b.Attributes(ctx, o.Key)
				if gcerrors.Code(err) == gcerrors.NotFound {
					continue // deleted since it was listed
				}
				if err != nil {
					yield("", s.wrap(ctx, "list", o.Key, err))
					return
				}
				exp, err := expiry(attrs.Metadata)
				if err != nil {
					yield("", fmt.Errorf("blob/gocloud: listing key %q: %w", o.Key, err))
					return
				}
				if !exp.IsZero() && exp.Before(before) && !yield(strings.TrimPrefix(o.Key, s.prefix), nil) {
					return
				}
			}
			if len(next) == 0 {
				return
			}
			token = next
		}
	}
}

// expiry reads the acemq-expires metadata; none is the zero time.
func expiry(md map[string]string) (time.Time, error) {
	v, ok := md[MetadataExpires]
	if !ok || v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: metadata %s is %q, not an RFC 3339 time", blob.ErrCorrupt, MetadataExpires, v)
	}
	return t, nil
}

// wrap prefixes a bucket error; a ctx error comes first so that errors.Is
// finds it.
func (s *store) wrap(ctx context.Context, what, id string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("blob/gocloud: %s %q: %w (%v)", what, id, cerr, err)
	}
	return fmt.Errorf("blob/gocloud: %s %q: %w", what, id, err)
}

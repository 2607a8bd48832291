package blob

import (
	"context"
	"io"
	"iter"
	"time"
)

// Counter is told the bytes a counted store moves; see [Counted]. Its
// methods may be called from several goroutines at once.
type Counter interface {
	// Stored is called once for each Put that succeeded, with its size.
	Stored(n int64)
	// Read is called as bytes are read through readers that Open returned.
	Read(n int64)
}

// Counted returns s with every byte it stores and every byte read from it
// reported to c. It is how a caller (the metrics of a Publisher or a
// handler, say) counts a store's traffic without any global state: two
// Counted wrappers of one store count apart.
func Counted(s Store, c Counter) Store {
	return &countedStore{s: s, c: c}
}

type countedStore struct {
	s Store
	c Counter
}

func (s *countedStore) Put(ctx context.Context, id string, r io.Reader, expires time.Time) (Info, error) {
	info, err := s.s.Put(ctx, id, r, expires)
	if err == nil {
		s.c.Stored(info.Size)
	}
	return info, err
}

func (s *countedStore) Open(ctx context.Context, id string, offset int64) (io.ReadCloser, error) {
	rc, err := s.s.Open(ctx, id, offset)
	if err != nil {
		return nil, err
	}
	return &countedReader{rc: rc, c: s.c}, nil
}

func (s *countedStore) Delete(ctx context.Context, id string) error {
	return s.s.Delete(ctx, id)
}

func (s *countedStore) Expired(ctx context.Context, before time.Time) iter.Seq2[string, error] {
	return s.s.Expired(ctx, before)
}

type countedReader struct {
	rc io.ReadCloser
	c  Counter
}

func (r *countedReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if n > 0 {
		r.c.Read(int64(n))
	}
	return n, err
}

func (r *countedReader) Close() error { return r.rc.Close() }

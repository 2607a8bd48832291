package blob

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// ChunkSize is the size of the pieces in which the stores here copy and
// keep their objects (the SQL store's rows): 1 MiB.
const ChunkSize = 1 << 20

var chunkPool = sync.Pool{New: func() any { b := make([]byte, ChunkSize); return &b }}

func getChunk() *[]byte  { return chunkPool.Get().(*[]byte) }
func putChunk(b *[]byte) { chunkPool.Put(b) }

// checkPut validates Put's arguments, the same way in every store.
func checkPut(id string, r io.Reader) error {
	if err := checkID(id); err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("blob: put %q: nil reader", id)
	}
	return nil
}

// checkOpen validates Open's arguments and ctx, the same way in every store.
func checkOpen(ctx context.Context, id string, offset int64) error {
	if err := checkID(id); err != nil {
		return err
	}
	if offset < 0 {
		return fmt.Errorf("blob: open %q: negative offset %d", id, offset)
	}
	return ctx.Err()
}

// checkID refuses the empty ID; every store accepts any other string.
func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: it is empty", ErrInvalidID)
	}
	return nil
}

func notFound(id string) error {
	return fmt.Errorf("%w: %q", ErrNotFound, id)
}

// isExpired reports whether an object with the given expiry is expired at
// now. The zero expiry never expires.
func isExpired(expires, now time.Time) bool {
	return !expires.IsZero() && expires.Before(now)
}

// copyCtx copies r to w in ChunkSize pieces through a pooled buffer,
// checking ctx before each read. A reader's error other than io.EOF is
// returned as is. each, when not nil, sees every piece before it is written.
func copyCtx(ctx context.Context, w io.Writer, r io.Reader, each func([]byte) error) (int64, error) {
	bp := getChunk()
	defer putChunk(bp)
	buf := *bp
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, rerr := r.Read(buf)
		if k > 0 {
			if each != nil {
				if err := each(buf[:k]); err != nil {
					return n, err
				}
			}
			wk, werr := w.Write(buf[:k])
			n += int64(wk)
			if werr != nil {
				return n, werr
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// CopyContext copies r to w as the stores here do: in ChunkSize pieces
// through a pooled buffer, checking ctx before each read. It is for
// writing a Store of your own (package blob/gocloud uses it); a reader's
// error other than io.EOF is returned as is.
func CopyContext(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	return copyCtx(ctx, w, r, nil)
}

// NewContextReader returns r as the reader a Store's Open returns: its
// reads end with ctx's error once ctx is done, and Close closes c (when
// not nil). It is for writing a Store of your own.
func NewContextReader(ctx context.Context, r io.Reader, c io.Closer) io.ReadCloser {
	return &ctxReader{ctx: ctx, r: r, c: c}
}

// ctxReader ends reads with ctx's error once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
	c   io.Closer
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func (c *ctxReader) Close() error {
	if c.c != nil {
		return c.c.Close()
	}
	return nil
}

package gocloud

import (
	"context"
	"crypto/sha256"
	"hash"
	"io"
	"sync"

	"github.com/acemq/acemq/blob"
)

var chunkPool = sync.Pool{New: func() any { b := make([]byte, blob.ChunkSize); return &b }}

// copyCtx copies r to w through a pooled buffer of blob.ChunkSize bytes,
// checking ctx before each read.
func copyCtx(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	bp := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(bp)
	buf := *bp
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, rerr := r.Read(buf)
		if k > 0 {
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

type hasher struct{ hash.Hash }

func newHasher() hasher { return hasher{sha256.New()} }

func (h hasher) info(id string, n int64) blob.Info {
	info := blob.Info{ID: id, Size: n}
	h.Sum(info.SHA256[:0])
	return info
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

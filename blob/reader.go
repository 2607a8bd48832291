package blob

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
)

// Reader reads a stored object for a handler: an io.Reader and io.Seeker
// over its bytes that checks them against the Ref. Read returns io.EOF only
// once the bytes read from the store are exactly the Ref's size and their
// SHA-256 is the Ref's; an object found shorter, longer or altered fails
// the Read with an error wrapping ErrCorrupt instead, and so does a read
// the store itself fails with ErrCorrupt (crypt.Store, whose bytes did not
// authenticate); either is final. A Seek away from the
// bytes read so far costs nothing then; at the end, the bytes never read
// are read once more to finish the digest, so the check holds whatever the
// order of reads.
//
// The Reader reads ahead in the background, at most two chunks
// (ChunkSize each) at any time, on one goroutine that ends when the
// handler returns (or at a Seek). It is not safe for concurrent use, and
// must not be used after the handler returned.
type Reader struct {
	ctx context.Context
	s   Store
	ref Ref

	pos    int64     // the offset of the next byte Read returns
	h      hash.Hash // the digest of bytes [0, hashed)
	hashed int64
	err    error // sticky: a corruption, or the reader closed

	st    *stream // reading ahead from pos; nil until the next Read
	chunk *piece  // the piece being read, with unread bytes at chunk.buf[chunk.off:chunk.n]
}

// piece is one chunk read ahead: n bytes of buf, and the error that ended
// the stream after them (io.EOF at the object's end).
type piece struct {
	buf *[]byte
	n   int
	off int
	err error
}

// stream reads an object ahead from an offset on its own goroutine into
// two buffers, which travel between the goroutine (free) and the Reader
// (full) and are never more than two.
type stream struct {
	cancel context.CancelFunc
	full   chan *piece
	free   chan *piece
	done   chan struct{}
}

var errReaderClosed = errors.New("blob: the Reader was used after its handler returned")

func newReader(ctx context.Context, s Store, ref Ref) *Reader {
	return &Reader{ctx: ctx, s: s, ref: ref, h: sha256.New()}
}

// Ref is the Ref of the object being read.
func (r *Reader) Ref() Ref { return r.ref }

// Size is the object's size in bytes, as its Ref says.
func (r *Reader) Size() int64 { return r.ref.Size }

// open starts reading ahead from r.pos. An absent object is ErrNotFound.
func (r *Reader) open() error {
	rc, err := r.s.Open(r.ctx, r.ref.ID, r.pos)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return err
		}
		return fmt.Errorf("blob: opening object %q at %d: %w", r.ref.ID, r.pos, err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	st := &stream{cancel: cancel, full: make(chan *piece, 2), free: make(chan *piece, 2), done: make(chan struct{})}
	for range 2 {
		st.free <- &piece{buf: getChunk()}
	}
	go st.run(ctx, rc)
	r.st = st
	return nil
}

// run fills free buffers from rc and hands them over, until rc ends or
// the Reader stops the stream. It owns rc.
func (st *stream) run(ctx context.Context, rc io.ReadCloser) {
	defer close(st.done)
	defer rc.Close()
	for {
		var p *piece
		select {
		case p = <-st.free:
		case <-ctx.Done():
			return
		}
		p.off = 0
		p.n, p.err = io.ReadFull(rc, *p.buf)
		if p.err == io.ErrUnexpectedEOF {
			p.err = io.EOF
		}
		if p.err == nil {
			p.err = ctx.Err() // a stopped stream hands over nothing more
		}
		st.full <- p // never blocks: two buffers, two slots
		if p.err != nil {
			return
		}
	}
}

// stop ends the stream's goroutine and gives its buffers back to the pool.
// held is the piece the Reader has (or nil).
func (st *stream) stop(held *piece) {
	st.cancel()
	<-st.done
	if held != nil {
		putChunk(held.buf)
	}
	for {
		select {
		case p := <-st.full:
			putChunk(p.buf)
		case p := <-st.free:
			putChunk(p.buf)
		default:
			return
		}
	}
}

// next returns the piece with the bytes from r.pos on, giving back the one
// read up.
func (r *Reader) next() (*piece, error) {
	if r.chunk != nil && r.chunk.off < r.chunk.n {
		return r.chunk, nil
	}
	if r.chunk != nil {
		if err := r.chunk.err; err != nil {
			return r.chunk, err
		}
		r.st.free <- r.chunk // never blocks
		r.chunk = nil
	}
	if r.st == nil {
		if err := r.open(); err != nil {
			return nil, err
		}
	}
	select {
	case r.chunk = <-r.st.full:
	case <-r.ctx.Done():
		return nil, r.ctx.Err()
	}
	if r.chunk.off < r.chunk.n {
		return r.chunk, nil
	}
	return r.chunk, r.chunk.err
}

// Read reads the object's next bytes into p; see Reader.
func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	c, err := r.next()
	if c == nil || c.off == c.n {
		switch {
		case err == io.EOF && r.pos < r.ref.Size:
			return 0, r.corrupt(fmt.Sprintf("it ends after %d of its %d bytes", r.pos, r.ref.Size))
		case err == io.EOF:
			return 0, r.finish()
		case err != nil:
			if errors.Is(err, ErrNotFound) {
				return 0, gone(r.ref)
			}
			err = fmt.Errorf("blob: reading object %q at %d: %w", r.ref.ID, r.pos, err)
			if errors.Is(err, ErrCorrupt) {
				// The store found the bytes corrupt as it read them (an
				// encrypting store's failed authentication): as final as a
				// digest that does not match.
				r.err = err
			}
			return 0, err
		}
	}
	if r.pos >= r.ref.Size {
		return 0, r.corrupt(fmt.Sprintf("it holds more than its %d bytes", r.ref.Size))
	}
	n := copy(p[:min(int64(len(p)), r.ref.Size-r.pos)], (*c.buf)[c.off:c.n])
	c.off += n
	if r.pos <= r.hashed && r.hashed < r.pos+int64(n) {
		r.h.Write(p[r.hashed-r.pos : n])
		r.hashed = r.pos + int64(n)
	}
	r.pos += int64(n)
	return n, nil
}

// finish checks the digest at the end of the object: what was not read in
// order is read now (the bytes after a Seek skipped them), then the sum is
// compared. It returns io.EOF when the object is whole.
func (r *Reader) finish() error {
	if r.hashed < r.ref.Size {
		rc, err := r.s.Open(r.ctx, r.ref.ID, r.hashed)
		if err != nil {
			return fmt.Errorf("blob: reading object %q at %d to check its digest: %w", r.ref.ID, r.hashed, err)
		}
		n, err := copyCtx(r.ctx, r.h, io.LimitReader(rc, r.ref.Size-r.hashed), nil)
		_ = rc.Close()
		if err != nil {
			return fmt.Errorf("blob: reading object %q at %d to check its digest: %w", r.ref.ID, r.hashed, err)
		}
		if r.hashed += n; r.hashed < r.ref.Size {
			return r.corrupt(fmt.Sprintf("it ends after %d of its %d bytes", r.hashed, r.ref.Size))
		}
	}
	var sum [32]byte
	if r.h.Sum(sum[:0]); sum != r.ref.digest() {
		return r.corrupt(fmt.Sprintf("its SHA-256 is %x, not %s", sum, r.ref.SHA256))
	}
	return io.EOF
}

func (r *Reader) corrupt(what string) error {
	r.err = fmt.Errorf("%w: %q: %s", ErrCorrupt, r.ref.ID, what)
	return r.err
}

// corrupted reports whether a Read found the object corrupt.
func (r *Reader) corrupted() bool { return r.err != nil && errors.Is(r.err, ErrCorrupt) }

// Seek sets the offset of the next Read, as io.Seeker says; an offset
// before 0 or past the object's end is an error. Reading resumes there
// with a fresh read of the store.
func (r *Reader) Seek(offset int64, whence int) (int64, error) {
	if r.err != nil {
		return r.pos, r.err
	}
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.pos
	case io.SeekEnd:
		offset += r.ref.Size
	default:
		return r.pos, fmt.Errorf("blob: Seek was given the whence %d", whence)
	}
	if offset < 0 || offset > r.ref.Size {
		return r.pos, fmt.Errorf("blob: Seek to %d is outside object %q of %d bytes", offset, r.ref.ID, r.ref.Size)
	}
	if offset != r.pos {
		r.stopStream()
		r.pos = offset
	}
	return offset, nil
}

func (r *Reader) stopStream() {
	if r.st != nil {
		r.st.stop(r.chunk)
		r.st, r.chunk = nil, nil
	}
}

// close ends the read-ahead; the Reader fails every call after it.
func (r *Reader) close() {
	r.stopStream()
	if r.err == nil {
		r.err = errReaderClosed
	}
}

package blob

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"iter"
	"slices"
	"sync"
	"time"
)

// Memory returns a Store that keeps its objects in the process's memory:
// for tests and for the memory transport. Its objects are lost with the
// process, and each one takes its whole size in memory, in pieces of
// ChunkSize bytes (a Put gathers its object before making it visible;
// readers share the stored pieces, copying nothing).
func Memory() Store {
	return &memoryStore{objects: make(map[string]*memoryObject)}
}

type memoryStore struct {
	mu      sync.Mutex
	objects map[string]*memoryObject
}

// memoryObject is never changed once stored: a Put replaces the pointer.
// Every chunk but the last holds ChunkSize bytes.
type memoryObject struct {
	chunks  [][]byte
	size    int64
	expires time.Time
}

func (m *memoryStore) Put(ctx context.Context, id string, r io.Reader, expires time.Time) (Info, error) {
	if err := checkPut(id, r); err != nil {
		return Info{}, err
	}
	o := &memoryObject{expires: expires}
	h := sha256.New()
	for {
		if err := ctx.Err(); err != nil {
			return Info{}, fmt.Errorf("blob: put %q: %w", id, err)
		}
		c := make([]byte, ChunkSize)
		n, err := io.ReadFull(r, c)
		if n > 0 {
			h.Write(c[:n])
			if n < ChunkSize { // the last: keep only its bytes
				c = append([]byte(nil), c[:n]...)
			}
			o.chunks = append(o.chunks, c[:n:n])
			o.size += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return Info{}, fmt.Errorf("blob: put %q: %w", id, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("blob: put %q: %w", id, err)
	}
	info := Info{ID: id, Size: o.size}
	h.Sum(info.SHA256[:0])
	m.mu.Lock()
	m.objects[id] = o
	m.mu.Unlock()
	return info, nil
}

func (m *memoryStore) Open(ctx context.Context, id string, offset int64) (io.ReadCloser, error) {
	if err := checkOpen(ctx, id, offset); err != nil {
		return nil, err
	}
	m.mu.Lock()
	o := m.objects[id]
	m.mu.Unlock()
	if o == nil || isExpired(o.expires, time.Now()) {
		return nil, notFound(id)
	}
	r := &chunksReader{chunks: o.chunks}
	if offset < o.size {
		r.chunks = o.chunks[offset/ChunkSize:]
		r.at = int(offset % ChunkSize)
	} else {
		r.chunks = nil
	}
	return &ctxReader{ctx: ctx, r: r}, nil
}

// chunksReader reads a memory object's chunks from at in the first.
type chunksReader struct {
	chunks [][]byte
	at     int
}

func (r *chunksReader) Read(p []byte) (int, error) {
	for len(r.chunks) > 0 && r.at >= len(r.chunks[0]) {
		r.chunks, r.at = r.chunks[1:], 0
	}
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0][r.at:])
	r.at += n
	return n, nil
}

func (m *memoryStore) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.objects, id)
	m.mu.Unlock()
	return nil
}

func (m *memoryStore) Expired(ctx context.Context, before time.Time) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := ctx.Err(); err != nil {
			yield("", err)
			return
		}
		m.mu.Lock()
		var ids []string
		for id, o := range m.objects {
			if isExpired(o.expires, before) {
				ids = append(ids, id)
			}
		}
		m.mu.Unlock()
		slices.Sort(ids)
		for _, id := range ids {
			if err := ctx.Err(); err != nil {
				yield("", err)
				return
			}
			if !yield(id, nil) {
				return
			}
		}
	}
}

package blob

import (
	"bytes"
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
// process, and each one takes its whole size in memory (a Put buffers its
// object before making it visible; readers share the stored bytes).
func Memory() Store {
	return &memoryStore{objects: make(map[string]*memoryObject)}
}

type memoryStore struct {
	mu      sync.Mutex
	objects map[string]*memoryObject
}

// memoryObject is never changed once stored: a Put replaces the pointer.
type memoryObject struct {
	data    []byte
	expires time.Time
}

func (m *memoryStore) Put(ctx context.Context, id string, r io.Reader, expires time.Time) (Info, error) {
	if err := checkPut(id, r); err != nil {
		return Info{}, err
	}
	var buf bytes.Buffer
	h := sha256.New()
	n, err := copyCtx(ctx, io.MultiWriter(&buf, h), r)
	if err != nil {
		return Info{}, fmt.Errorf("blob: put %q: %w", id, err)
	}
	info := Info{ID: id, Size: n}
	h.Sum(info.SHA256[:0])
	m.mu.Lock()
	m.objects[id] = &memoryObject{data: buf.Bytes(), expires: expires}
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
	offset = min(offset, int64(len(o.data)))
	return &ctxReader{ctx: ctx, r: bytes.NewReader(o.data[offset:])}, nil
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

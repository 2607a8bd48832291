package blob

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Dir returns a Store that keeps each object as two files in the directory
// path, which must exist:
//
//   - NAME holds the object's bytes, exactly as they were put (an operator
//     can read it with any tool);
//   - NAME.meta is a small JSON sidecar with the ID, the size, the SHA-256
//     and the expiry, so that expiry is known without opening the data.
//
// NAME is the ID with every byte outside a-z, 0-9, '-' and '_' written as
// %XX (so IDs that differ only in case stay apart on a case-insensitive
// file system); an ID whose NAME would be over 200 bytes is refused.
//
// A Put writes both files under temporary names (".tmp-..." in the same
// directory), fsyncs them, renames the sidecar and then the data into
// place, and fsyncs the directory: a partial write is never visible under
// the ID, and an object whose Put returned survives a crash. Temporary
// files a crashed process left are removed by Dir once they have not been
// written for an hour.
//
// Concurrent Puts of one ID within a process are committed one at a time
// (the last to finish wins). Several processes may share the directory,
// but two of them putting the same ID at the same instant may leave one's
// bytes under the other's sidecar; acemq gives every payload its own ID, so
// this does not arise from Send. A reader keeps reading the bytes it opened
// even when the object is deleted or replaced meanwhile (the file system
// keeps an open file).
func Dir(path string) (Store, error) {
	if path == "" {
		return nil, errors.New("blob: Dir was given an empty path")
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("blob: Dir: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("blob: Dir: %s is not a directory", path)
	}
	d := &dirStore{path: path, locks: make(map[string]*idLock)}
	if err := d.removeStaleTemps(time.Now().Add(-staleTemp)); err != nil {
		return nil, err
	}
	return d, nil
}

const (
	metaSuffix = ".meta"
	tempPrefix = ".tmp-"
	maxName    = 200
	staleTemp  = time.Hour
)

type dirStore struct {
	path string

	mu    sync.Mutex
	locks map[string]*idLock
}

// idLock serialises the commits of one ID; refs counts its holders and
// waiters so that the map forgets it when none is left.
type idLock struct {
	mu   sync.Mutex
	refs int
}

// dirMeta is the sidecar's content.
type dirMeta struct {
	ID      string    `json:"id"`
	Size    int64     `json:"size"`
	SHA256  string    `json:"sha256"`
	Expires time.Time `json:"expires,omitzero"`
}

func (d *dirStore) Put(ctx context.Context, id string, r io.Reader, expires time.Time) (info Info, err error) {
	name, err := d.name(id)
	if err != nil {
		return Info{}, err
	}
	if r == nil {
		return Info{}, fmt.Errorf("blob: put %q: nil reader", id)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("blob: put %q in %s: %w", id, d.path, err)
		}
	}()
	data, err := d.writeTemp(func(f *os.File) error {
		h := sha256.New()
		n, err := copyCtx(ctx, io.MultiWriter(f, h), r, nil)
		if err != nil {
			return err
		}
		info = Info{ID: id, Size: n}
		h.Sum(info.SHA256[:0])
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	defer removeIfExists(data)
	meta, err := json.Marshal(dirMeta{ID: id, Size: info.Size, SHA256: hex.EncodeToString(info.SHA256[:]), Expires: expires.UTC()})
	if err != nil {
		return Info{}, err
	}
	metaTemp, err := d.writeTemp(func(f *os.File) error {
		_, err := f.Write(meta)
		return err
	})
	if err != nil {
		return Info{}, err
	}
	defer removeIfExists(metaTemp)
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	unlock := d.lock(id)
	defer unlock()
	final := filepath.Join(d.path, name)
	if err := os.Rename(metaTemp, final+metaSuffix); err != nil {
		return Info{}, err
	}
	if err := os.Rename(data, final); err != nil {
		return Info{}, err
	}
	return info, syncDir(d.path)
}

// writeTemp creates a temporary file in the directory, fills it with
// write, fsyncs and closes it, and returns its path. On failure the file
// is removed.
func (d *dirStore) writeTemp(write func(*os.File) error) (path string, err error) {
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	path = filepath.Join(d.path, tempPrefix+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	if err = write(f); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		removeIfExists(path)
		return "", err
	}
	return path, nil
}

func (d *dirStore) Open(ctx context.Context, id string, offset int64) (io.ReadCloser, error) {
	if err := checkOpen(ctx, id, offset); err != nil {
		return nil, err
	}
	name, err := d.name(id)
	if err != nil {
		return nil, err
	}
	final := filepath.Join(d.path, name)
	m, err := readMeta(final + metaSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound(id)
	}
	if err == nil && m.ID != id {
		err = fmt.Errorf("%w: sidecar %s names the id %q", ErrCorrupt, final+metaSuffix, m.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("blob: open %q in %s: %w", id, d.path, err)
	}
	if isExpired(m.Expires, time.Now()) {
		return nil, notFound(id)
	}
	f, err := os.Open(final)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, fmt.Errorf("blob: open %q in %s: %w", id, d.path, err)
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("blob: open %q in %s at offset %d: %w", id, d.path, offset, err)
		}
	}
	return &ctxReader{ctx: ctx, r: f, c: f}, nil
}

func readMeta(path string) (dirMeta, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return dirMeta{}, err
	}
	var m dirMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return dirMeta{}, fmt.Errorf("%w: sidecar %s: %v", ErrCorrupt, path, err)
	}
	return m, nil
}

// Delete removes the data and then the sidecar, so that an interrupted
// Delete leaves a sidecar that Expired still lists.
func (d *dirStore) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	name, err := d.name(id)
	if err != nil {
		return err
	}
	unlock := d.lock(id)
	defer unlock()
	final := filepath.Join(d.path, name)
	for _, p := range []string{final, final + metaSuffix} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("blob: delete %q in %s: %w", id, d.path, err)
		}
	}
	return syncDir(d.path)
}

// Expired reads the directory and the sidecars, never the data. The ID
// of an object is its file name's, never the one written in its sidecar.
// A sidecar that cannot be read or decoded, whose name is not one this
// store writes, or that names another ID is yielded as an error naming it
// (wrapping ErrCorrupt when it is unreadable or inconsistent) and skipped:
// the listing goes on after it.
func (d *dirStore) Expired(ctx context.Context, before time.Time) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		entries, err := os.ReadDir(d.path)
		if err != nil {
			yield("", fmt.Errorf("blob: listing %s: %w", d.path, err))
			return
		}
		for _, e := range entries {
			if err := ctx.Err(); err != nil {
				yield("", err)
				return
			}
			n := e.Name()
			if !strings.HasSuffix(n, metaSuffix) || strings.HasPrefix(n, ".") || e.IsDir() {
				continue
			}
			path := filepath.Join(d.path, n)
			id, ok := d.idOf(strings.TrimSuffix(n, metaSuffix))
			if !ok {
				if !yield("", fmt.Errorf("blob: listing %s: %s is not a sidecar of this store: its name is no object's, so it was skipped", d.path, path)) {
					return
				}
				continue
			}
			m, err := readMeta(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted since the directory was read
			}
			if err == nil && m.ID != id {
				err = fmt.Errorf("%w: sidecar %s names the id %q, not its own %q", ErrCorrupt, path, m.ID, id)
			}
			if err != nil {
				if !yield("", fmt.Errorf("blob: listing %s: skipped object %q: %w", d.path, id, err)) {
					return
				}
				continue
			}
			if isExpired(m.Expires, before) && !yield(id, nil) {
				return
			}
		}
	}
}

// idOf is the ID whose file name is name, and false when name is not
// one that name gives any ID.
func (d *dirStore) idOf(name string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] != '%' {
			b.WriteByte(name[i])
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		c, err := hex.DecodeString(name[i+1 : i+3])
		if err != nil {
			return "", false
		}
		b.WriteByte(c[0])
		i += 2
	}
	id := b.String()
	if again, err := d.name(id); err != nil || again != name {
		return "", false
	}
	return id, true
}

// removeStaleTemps removes the temporary files last written before
// cutoff: what a process that died in a Put left.
func (d *dirStore) removeStaleTemps(cutoff time.Time) error {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return fmt.Errorf("blob: Dir: %w", err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) {
			removeIfExists(filepath.Join(d.path, e.Name()))
		}
	}
	return nil
}

// name is the file name of id's data.
func (d *dirStore) name(id string) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	if b.Len() > maxName {
		return "", fmt.Errorf("%w: %q is too long for a Dir store (%d bytes as a file name; at most %d)", ErrInvalidID, id, b.Len(), maxName)
	}
	return b.String(), nil
}

// lock takes id's commit lock and returns its release.
func (d *dirStore) lock(id string) (unlock func()) {
	d.mu.Lock()
	l := d.locks[id]
	if l == nil {
		l = &idLock{}
		d.locks[id] = l
	}
	l.refs++
	d.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		d.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(d.locks, id)
		}
		d.mu.Unlock()
	}
}

// removeIfExists removes a temporary file, if it is still there. One that
// cannot be removed is removed by a later Dir, once stale.
func removeIfExists(path string) { _ = os.Remove(path) }

// syncDir fsyncs a directory so that the renames and removals in it
// survive a crash.
func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

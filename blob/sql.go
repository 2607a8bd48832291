package blob

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"regexp"
	"time"
)

// DefaultSQLTable is the name of the SQL store's object table unless
// SQLTable says otherwise; its chunks live in DefaultSQLTable + "_chunk".
const DefaultSQLTable = "acemq_blob"

// ErrNotMigrated is wrapped by the errors of an SQL store whose tables do
// not exist: call SQLStore.Migrate first.
var ErrNotMigrated = errors.New("blob: the SQL store's tables do not exist; call (*blob.SQLStore).Migrate first")

// SQLOption configures the store SQLDB returns.
type SQLOption interface{ applySQL(*sqlConfig) }

type sqlOptionFunc func(*sqlConfig)

func (f sqlOptionFunc) applySQL(c *sqlConfig) { f(c) }

type sqlConfig struct {
	table string
	errs  []error
}

// sqlTableName is what SQLTable accepts: a plain SQL identifier short
// enough for its "_chunk" and index suffixes within PostgreSQL's 63.
var sqlTableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,39}$`)

// SQLTable sets the name of the object table (acemq_blob by default); the
// chunk table is the same name followed by "_chunk". The name must be a
// plain SQL identifier of at most 40 characters; anything else makes SQLDB
// fail. To use another PostgreSQL schema, set the connection's
// search_path.
func SQLTable(name string) SQLOption {
	return sqlOptionFunc(func(c *sqlConfig) {
		if !sqlTableName.MatchString(name) {
			c.errs = append(c.errs, fmt.Errorf("blob: table name %q is not a plain SQL identifier (letters, digits and _, not starting with a digit, at most 40 characters)", name))
			return
		}
		c.table = name
	})
}

// SQLStore is a Store that keeps objects as rows in a database the
// service already has (its PostgreSQL or SQLite, often the outbox's), so
// large payloads need no new infrastructure. Build it with SQLDB and create
// its tables with Migrate. It is safe for concurrent use.
//
// An object is one row of the object table (its ID, size, SHA-256, expiry
// and generation) and its bytes are rows of ChunkSize bytes in the chunk
// table. A Put writes every chunk and then the object row in one
// transaction, so a failed or cancelled Put leaves nothing, and concurrent
// Puts of one ID leave the last one to commit. Each Put writes a new
// generation; the commit deletes the chunks of the others. Open reads the
// object row and then one chunk per query as the reader needs it, so an
// object is never loaded whole; a reader whose object is replaced or
// deleted while it reads fails with an error wrapping ErrNotFound.
//
// Expiry is compared with this process's clock (as Dir and Memory do), not
// the database's. On SQLite with one connection (SetMaxOpenConns(1), as
// SQLite with database/sql is usually run), a Put holds the connection for
// its whole transaction: a Put whose reader reads from the same database
// waits for itself.
type SQLStore struct {
	db      *sql.DB
	dialect SQLDialect
	table   string
	chunks  string

	putChunk, upsert, dropOld, head, chunk, expired, delHead, delChunks string
}

// SQLDB returns a Store in db, whose dialect is dialect, with tables
// named acemq_blob and acemq_blob_chunk unless SQLTable says otherwise. It
// creates nothing: call Migrate once (or run its statements with your own
// migration tool). It needs no outbox; a service that has one passes its
// database: SQLDB(o.DB(), blob.SQLDialect(o.Dialect())).
func SQLDB(db *sql.DB, dialect SQLDialect, opts ...SQLOption) (*SQLStore, error) {
	if db == nil {
		return nil, errors.New("blob: SQLDB was given a nil *sql.DB")
	}
	if dialect != Postgres && dialect != SQLite {
		return nil, fmt.Errorf("blob: SQLDB was given dialect %v; want blob.Postgres or blob.SQLite", dialect)
	}
	cfg := sqlConfig{table: DefaultSQLTable}
	for _, opt := range opts {
		if opt == nil {
			cfg.errs = append(cfg.errs, errors.New("blob: SQLDB was given a nil SQLOption"))
			continue
		}
		opt.applySQL(&cfg)
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, err
	}
	s := &SQLStore{db: db, dialect: dialect, table: cfg.table, chunks: cfg.table + "_chunk"}
	t, c, q := s.table, s.chunks, s.rebind
	s.putChunk = q(`INSERT INTO ` + c + ` (blob_id, gen, seq, data) VALUES (?, ?, ?, ?)`)
	s.upsert = q(`INSERT INTO ` + t + ` (id, gen, size, chunk_size, sha256, expires_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET gen = excluded.gen, size = excluded.size, chunk_size = excluded.chunk_size,
sha256 = excluded.sha256, expires_at = excluded.expires_at, created_at = excluded.created_at`)
	s.dropOld = q(`DELETE FROM ` + c + ` WHERE blob_id = ? AND gen <> ?`)
	s.head = q(`SELECT gen, size, chunk_size, expires_at FROM ` + t + ` WHERE id = ?`)
	s.chunk = q(`SELECT data FROM ` + c + ` WHERE blob_id = ? AND gen = ? AND seq = ?`)
	s.expired = q(`SELECT id FROM ` + t + ` WHERE expires_at IS NOT NULL AND expires_at < ? AND id > ? ORDER BY id LIMIT ?`)
	s.delHead = q(`DELETE FROM ` + t + ` WHERE id = ?`)
	s.delChunks = q(`DELETE FROM ` + c + ` WHERE blob_id = ?`)
	return s, nil
}

// TableName returns the name of the object table; the chunk table's is
// TableName() + "_chunk".
func (s *SQLStore) TableName() string { return s.table }

// Migrate creates the two tables and the expiry index, if they do not
// exist. Every statement is idempotent.
//
// The object table TABLE: id (text, the primary key), gen (the generation
// of the Put that wrote it), size, chunk_size, sha256 (bytea / blob),
// expires_at (NULL: never) and created_at; the index TABLE_expires_idx on
// expires_at. The chunk table TABLE_chunk: blob_id, gen, seq and data, with
// the primary key (blob_id, gen, seq). Times are timestamptz on PostgreSQL
// and Unix microseconds on SQLite.
func (s *SQLStore) Migrate(ctx context.Context) error {
	ts, bytes := "TIMESTAMPTZ", "BYTEA"
	if s.dialect == SQLite {
		ts, bytes = "INTEGER", "BLOB"
	}
	for _, stmt := range []string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id TEXT PRIMARY KEY,
	gen BIGINT NOT NULL,
	size BIGINT NOT NULL,
	chunk_size INTEGER NOT NULL,
	sha256 %s NOT NULL,
	expires_at %s,
	created_at %s NOT NULL
)`, s.table, bytes, ts, ts),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %[1]s_expires_idx ON %[1]s (expires_at) WHERE expires_at IS NOT NULL`, s.table),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	blob_id TEXT NOT NULL,
	gen BIGINT NOT NULL,
	seq INTEGER NOT NULL,
	data %s NOT NULL,
	PRIMARY KEY (blob_id, gen, seq)
)`, s.chunks, bytes),
	} {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("blob: migrating tables %s and %s: %w", s.table, s.chunks, err)
		}
	}
	return nil
}

// Drop deletes both tables and every object in them. It is meant for tests
// and tear-downs.
func (s *SQLStore) Drop(ctx context.Context) error {
	for _, t := range []string{s.chunks, s.table} {
		if _, err := s.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
			return fmt.Errorf("blob: dropping table %s: %w", t, err)
		}
	}
	return nil
}

// Put implements Store.
func (s *SQLStore) Put(ctx context.Context, id string, r io.Reader, expires time.Time) (Info, error) {
	if err := checkPut(id, r); err != nil {
		return Info{}, err
	}
	info, err := s.put(ctx, id, r, expires)
	if err != nil {
		// A cancelled ctx rolls the transaction back under the Put, whose
		// next statement then fails for that reason only.
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%v)", cerr, err)
		}
		return Info{}, s.fail(ctx, fmt.Sprintf("put %q", id), err)
	}
	return info, nil
}

func (s *SQLStore) put(ctx context.Context, id string, r io.Reader, expires time.Time) (info Info, err error) {
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	gen, err := newGen()
	if err != nil {
		return Info{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Info{}, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	stmt, err := tx.PrepareContext(ctx, s.putChunk)
	if err != nil {
		return Info{}, err
	}
	defer func() { _ = stmt.Close() }()
	bp := getChunk()
	defer putChunk(bp)
	buf := *bp
	h := sha256.New()
	var size int64
	for seq := 0; ; seq++ {
		if err := ctx.Err(); err != nil {
			return Info{}, err
		}
		n, rerr := io.ReadFull(r, buf)
		if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
			return Info{}, rerr
		}
		if n > 0 {
			h.Write(buf[:n])
			size += int64(n)
			if _, err := stmt.ExecContext(ctx, id, gen, seq, buf[:n]); err != nil {
				return Info{}, err
			}
		}
		if rerr != nil {
			break
		}
	}
	info = Info{ID: id, Size: size}
	h.Sum(info.SHA256[:0])
	if _, err := tx.ExecContext(ctx, s.upsert, id, gen, size, ChunkSize, info.SHA256[:], s.nullTime(expires), s.timeArg(time.Now())); err != nil {
		return Info{}, err
	}
	if _, err := tx.ExecContext(ctx, s.dropOld, id, gen); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	if err := tx.Commit(); err != nil {
		return Info{}, err
	}
	return info, nil
}

// newGen returns a random positive generation number.
func newGen() (int64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(b[:]) >> 1), nil
}

// Open implements Store.
func (s *SQLStore) Open(ctx context.Context, id string, offset int64) (io.ReadCloser, error) {
	if err := checkOpen(ctx, id, offset); err != nil {
		return nil, err
	}
	var (
		gen, size int64
		chunkSize int
		exp       nullableTime
	)
	err := s.db.QueryRowContext(ctx, s.head, id).Scan(&gen, &size, &chunkSize, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, s.fail(ctx, fmt.Sprintf("open %q", id), err)
	}
	if isExpired(exp.t, time.Now()) {
		return nil, notFound(id)
	}
	if chunkSize <= 0 || size < 0 {
		return nil, fmt.Errorf("%w: %q has size %d in chunks of %d in table %s", ErrCorrupt, id, size, chunkSize, s.table)
	}
	return &sqlReader{ctx: ctx, s: s, id: id, gen: gen, size: size, chunkSize: int64(chunkSize), pos: min(offset, size)}, nil
}

// sqlReader reads one chunk per query, as Read needs it.
type sqlReader struct {
	ctx       context.Context
	s         *SQLStore
	id        string
	gen       int64
	size      int64
	chunkSize int64
	pos       int64 // the offset of the next byte Read returns

	buf    []byte // the chunk holding pos, from bufAt
	bufAt  int64
	closed bool
}

func (r *sqlReader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, fmt.Errorf("blob: read of %q after Close", r.id)
	}
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	if r.pos >= r.size {
		return 0, io.EOF
	}
	if r.buf == nil || r.pos < r.bufAt || r.pos >= r.bufAt+int64(len(r.buf)) {
		if err := r.load(r.pos / r.chunkSize); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf[r.pos-r.bufAt:])
	r.pos += int64(n)
	return n, nil
}

// load reads chunk seq into the reader's buffer.
func (r *sqlReader) load(seq int64) error {
	want := min(r.chunkSize, r.size-seq*r.chunkSize)
	rows, err := r.s.db.QueryContext(r.ctx, r.s.chunk, r.id, r.gen, seq)
	if err != nil {
		return r.s.fail(r.ctx, fmt.Sprintf("reading %q", r.id), err)
	}
	defer func() { _ = rows.Close() }()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return r.s.fail(r.ctx, fmt.Sprintf("reading %q", r.id), err)
		}
		return fmt.Errorf("%w: %q was deleted or replaced while it was read (chunk %d gone)", ErrNotFound, r.id, seq)
	}
	var raw sql.RawBytes
	if err := rows.Scan(&raw); err != nil {
		return fmt.Errorf("blob: reading %q: %w", r.id, err)
	}
	if int64(len(raw)) != want {
		return fmt.Errorf("%w: chunk %d of %q holds %d bytes; want %d", ErrCorrupt, seq, r.id, len(raw), want)
	}
	if r.buf == nil {
		r.buf = (*getChunk())[:0]
	}
	if int64(cap(r.buf)) < want {
		r.buf = make([]byte, 0, want)
	}
	r.buf = append(r.buf[:0], raw...)
	r.bufAt = seq * r.chunkSize
	return rows.Close()
}

func (r *sqlReader) Close() error {
	if !r.closed && r.buf != nil && cap(r.buf) == ChunkSize {
		b := r.buf[:ChunkSize]
		putChunk(&b)
	}
	r.closed, r.buf = true, nil
	return nil
}

// Delete implements Store.
func (s *SQLStore) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(id); err != nil {
		return err
	}
	if err := s.delete(ctx, id); err != nil {
		return s.fail(ctx, fmt.Sprintf("delete %q", id), err)
	}
	return nil
}

func (s *SQLStore) delete(ctx context.Context, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, s.delHead, id); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.delChunks, id); err != nil {
		return err
	}
	return tx.Commit()
}

// expiredPage is how many IDs Expired reads per query; it yields them only
// once the query's rows are closed, so that the caller may use the
// database (Delete, as Sweep does) between yields, even over one
// connection.
const expiredPage = 500

// Expired implements Store.
func (s *SQLStore) Expired(ctx context.Context, before time.Time) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		after := ""
		for {
			if err := ctx.Err(); err != nil {
				yield("", err)
				return
			}
			ids, err := s.expiredPage(ctx, before, after)
			if err != nil {
				yield("", s.fail(ctx, "listing expired objects", err))
				return
			}
			for _, id := range ids {
				if !yield(id, nil) {
					return
				}
			}
			if len(ids) < expiredPage {
				return
			}
			after = ids[len(ids)-1]
		}
	}
}

func (s *SQLStore) expiredPage(ctx context.Context, before time.Time, after string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, s.expired, s.timeArg(before), after, expiredPage)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// fail wraps err with what was being done and the table; when the tables
// do not exist (the store was not migrated), it wraps ErrNotMigrated too.
// A ctx error is returned so that errors.Is finds it.
func (s *SQLStore) fail(ctx context.Context, what string, err error) error {
	if ctx.Err() == nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorrupt) && !s.tablesExist(ctx) {
		return fmt.Errorf("%w (tables %s and %s): %s: %w", ErrNotMigrated, s.table, s.chunks, what, err)
	}
	return fmt.Errorf("blob: %s in table %s: %w", what, s.table, err)
}

// CheckTables reports whether the store's two tables exist where its
// queries look for them (on PostgreSQL, in the schemas of the search_path):
// nil when both do, an error wrapping ErrNotMigrated and naming them when
// either is missing, and the database's error when it could not be asked.
// A tool calls it before it works on a store it did not create, so that a
// wrong table name is said as such rather than as a failed query.
func (s *SQLStore) CheckTables(ctx context.Context) error {
	q := `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)`
	if s.dialect == Postgres {
		q = `SELECT COUNT(*) FROM pg_catalog.pg_tables WHERE tablename IN ($1, $2) AND schemaname = ANY(current_schemas(false))`
	}
	var n int
	if err := s.db.QueryRowContext(ctx, q, s.table, s.chunks).Scan(&n); err != nil {
		return fmt.Errorf("blob: looking for tables %s and %s: %w", s.table, s.chunks, err)
	}
	if n != 2 {
		return fmt.Errorf("%w (tables %s and %s)", ErrNotMigrated, s.table, s.chunks)
	}
	return nil
}

// tablesExist reports whether both tables exist; an error asking counts as
// yes, leaving the original error to speak.
func (s *SQLStore) tablesExist(ctx context.Context) bool {
	return !errors.Is(s.CheckTables(ctx), ErrNotMigrated)
}

// rebind gives q, written with ? placeholders, the dialect's.
func (s *SQLStore) rebind(q string) string { return s.dialect.rebind(q) }

// timeArg is a time as a query argument: UTC for PostgreSQL, Unix
// microseconds for SQLite.
func (s *SQLStore) timeArg(t time.Time) any { return s.dialect.timeArg(t) }

// nullTime is timeArg with the zero time as NULL.
func (s *SQLStore) nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return s.timeArg(t)
}

// nullableTime scans a time column of either dialect; NULL is the zero
// time.
type nullableTime struct{ t time.Time }

// Scan implements sql.Scanner.
func (n *nullableTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		n.t = time.Time{}
	case time.Time:
		n.t = x
	case int64:
		n.t = time.UnixMicro(x)
	default:
		return fmt.Errorf("blob: a %T is not a time", v)
	}
	return nil
}

package outbox

import (
	"database/sql"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Dialect is the SQL dialect of the database an Outbox or Inbox writes to:
// Postgres or SQLite. The zero Dialect is invalid.
type Dialect int

const (
	// Postgres is PostgreSQL (any database/sql driver; acemq's tests use
	// github.com/jackc/pgx/v5/stdlib). Placeholders are $1, $2, ...; times
	// are timestamptz; several relays may share a table.
	Postgres Dialect = iota + 1
	// SQLite is SQLite 3.35 or later (acemq's tests use the pure-Go
	// modernc.org/sqlite). Placeholders are ?; times are stored as Unix
	// microseconds in INTEGER columns; run one relay per database.
	SQLite
)

// String returns "postgres" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

func (d Dialect) valid() bool { return d == Postgres || d == SQLite }

// ph returns the i-th placeholder (1-based).
func (d Dialect) ph(i int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(i)
	}
	return "?"
}

// phs returns n placeholders from first on, comma-separated.
func (d Dialect) phs(first, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(d.ph(first + i))
	}
	return b.String()
}

// Rebind replaces each "?" in q with the dialect's placeholder ($1, $2,
// ... on PostgreSQL; SQLite keeps ?), for queries written once for both.
// q must hold no other question mark (in a string literal, say).
func (d Dialect) Rebind(q string) string { return d.sql(q) }

// TimeArg is a time as a query argument for the columns acemq's tables
// use: a UTC time.Time on PostgreSQL, Unix microseconds on SQLite.
func (d Dialect) TimeArg(t time.Time) any { return d.timeArg(t) }

// sql replaces each "?" in q with the dialect's numbered placeholder; the
// queries in this package contain no other question marks.
func (d Dialect) sql(q string) string {
	if d != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString(d.ph(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// timeArg is how a time travels as a query argument: a UTC time.Time for
// PostgreSQL, Unix microseconds for SQLite.
func (d Dialect) timeArg(t time.Time) any {
	if d == Postgres {
		return t.UTC()
	}
	return t.UnixMicro()
}

// now is the SQL expression of the database's clock, in the form the time
// columns hold: now() on PostgreSQL (the transaction's start), Unix
// microseconds on SQLite (the statement's start, to the millisecond).
func (d Dialect) now() string {
	if d == Postgres {
		return "now()"
	}
	return "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)"
}

// later is the SQL expression of the time the integer placeholder's
// microseconds after base.
func (d Dialect) later(base string) string {
	if d == Postgres {
		return "(" + base + " + CAST(? AS BIGINT) * INTERVAL '1 microsecond')"
	}
	return "(" + base + " + ?)"
}

// greatest is the SQL expression of the later of two times.
func (d Dialect) greatest(a, b string) string {
	if d == Postgres {
		return "GREATEST(" + a + ", " + b + ")"
	}
	return "MAX(" + a + ", " + b + ")"
}

// Column types by dialect.
func (d Dialect) types() (id, timestamp, blob, jsonText string) {
	if d == Postgres {
		return "BIGSERIAL PRIMARY KEY", "TIMESTAMPTZ", "BYTEA", "JSON"
	}
	return "INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER", "BLOB", "TEXT"
}

// dbTime scans a time column of either dialect: a time.Time (PostgreSQL)
// or Unix microseconds (SQLite). NULL leaves it zero.
type dbTime struct{ t time.Time }

// Scan implements sql.Scanner.
func (s *dbTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		s.t = time.Time{}
	case time.Time:
		s.t = x.UTC()
	case int64:
		s.t = time.UnixMicro(x).UTC()
	case []byte:
		return s.parse(string(x))
	case string:
		return s.parse(x)
	default:
		return fmt.Errorf("a %T is not a time", v)
	}
	return nil
}

func (s *dbTime) parse(text string) error {
	if n, err := strconv.ParseInt(text, 10, 64); err == nil {
		s.t = time.UnixMicro(n).UTC()
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, text)
	if err != nil {
		return fmt.Errorf("%q is not a time", text)
	}
	s.t = t.UTC()
	return nil
}

var _ sql.Scanner = (*dbTime)(nil)

// identifier is what Table accepts: a plain SQL identifier, which needs no
// quoting in either dialect. 48 characters leave room for the index name
// within PostgreSQL's 63.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,47}$`)

// checkTable reports whether name can be used as a table name.
func checkTable(name string) error {
	if !identifier.MatchString(name) {
		return fmt.Errorf("outbox: table name %q is not a plain SQL identifier (letters, digits and _, not starting with a digit, at most 48 characters; select a schema with the connection's search_path)", name)
	}
	return nil
}

// nonNil makes an empty body an empty value rather than SQL NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

package blob

import (
	"strconv"
	"strings"
	"time"
)

// SQLDialect is the SQL dialect of the database an SQLStore writes to:
// Postgres or SQLite. The zero SQLDialect is invalid. Its values are those
// of outbox.Dialect, so a store in an outbox's database can be built with
// SQLDB(o.DB(), blob.SQLDialect(o.Dialect())); package blob itself does
// not import the outbox.
type SQLDialect int

const (
	// Postgres is PostgreSQL, through any database/sql driver (acemq's
	// tests use github.com/jackc/pgx/v5/stdlib). Times are timestamptz,
	// bytes bytea.
	Postgres SQLDialect = iota + 1
	// SQLite is SQLite 3.35 or later (acemq's tests use the pure-Go
	// modernc.org/sqlite). Times are Unix microseconds in INTEGER columns,
	// bytes BLOB.
	SQLite
)

// String returns "postgres" or "sqlite".
func (d SQLDialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return "SQLDialect(" + strconv.Itoa(int(d)) + ")"
}

// rebind replaces each "?" in q with the dialect's placeholder: $1, $2, ...
// on PostgreSQL; SQLite keeps ?. The store's queries hold no other
// question mark.
func (d SQLDialect) rebind(q string) string {
	if d != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r != '?' {
			b.WriteRune(r)
			continue
		}
		n++
		b.WriteString("$" + strconv.Itoa(n))
	}
	return b.String()
}

// timeArg is a time as a query argument: a UTC time.Time on PostgreSQL,
// Unix microseconds on SQLite.
func (d SQLDialect) timeArg(t time.Time) any {
	if d == Postgres {
		return t.UTC()
	}
	return t.UnixMicro()
}

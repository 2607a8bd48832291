// Package outbox is a transactional outbox for acemq over database/sql: a
// message is written into a table of the application's database in the
// same transaction as the change it announces, and a [Relay] publishes it
// afterwards. Either both the change and the message happen or neither
// does; a rolled-back transaction publishes nothing.
//
// The package works with PostgreSQL and SQLite (the [Dialect] says which)
// and imports no driver: open the *sql.DB with the driver of your choice
// (acemq's tests use github.com/jackc/pgx/v5/stdlib and the pure-Go
// modernc.org/sqlite).
//
// # Writing
//
// [Publisher.Send] runs the Conn's publish interceptors and codec at write
// time, exactly as acemq.Publisher.Send would, and inserts the resulting
// envelope and body within the caller's *sql.Tx. An interceptor's refusal
// is returned as it is and writes nothing. The trace context, tenant or
// any other header an interceptor stamps is stored with the row, because
// the relay runs no interceptors: it sends what was stored.
//
// The envelope is stored as JSON in the headers column. Every field comes
// back as it was, and so does every header, Go type included: strings,
// bools, nil and finite float64s are plain JSON; integers of every width,
// float32, NaN and infinities, []byte, time.Time and nested tables are
// stored as {"$t": type, "v": value} and read back as that type. A
// time.Time keeps its instant and offset, not its Location's name or its
// monotonic reading. Arrays are JSON arrays of such values. Strings and
// header names that are not valid UTF-8 are stored in base64, so they come
// back byte for byte, as from a direct publish.
//
// Send checks what the database or the broker would refuse before it
// touches the transaction: NUL bytes and invalid UTF-8 in text columns and
// At after the year 9999 fail with an error wrapping [ErrInvalid]; AMQP
// short strings over 255 bytes and header values AMQP cannot carry fail
// with the Conn's own envelope error, as a direct Send would. Either way
// the caller's transaction stays usable.
//
// # Scheduling
//
// [At] and [After] make a row due later: the relay publishes it once due_at
// has passed, never before, and at most a PollInterval late. due_at and the
// relays' leases are computed with the database's clock (now() on
// PostgreSQL, julianday('now') on SQLite), not the application's. They are
// acemq.SendOptions; a plain acemq.Publisher ignores them and sends at
// once. A row scheduled this way waits in the table and can be deleted
// before it is due: a schedule that may be cancelled.
//
// acemq.After and acemq.At (the root package's) do the other thing: the
// row is due at once, and the relay publishes it into the broker's delay
// topology, so it leaves the table at commit and waits in the broker,
// where it can no longer be recalled. docs/scheduling.md compares the two.
//
// # Relaying
//
// A Relay claims due rows in (due_at, id) order, walking an index of the
// rows that are not dead, a batch at a time, by setting a lease
// (locked_until) in one UPDATE; on PostgreSQL the rows are picked with FOR
// UPDATE SKIP LOCKED, so several relays share a table without sending a row
// twice. The batch is published concurrently through Conn.PublishRaw with
// at most Window confirms outstanding, and each row is deleted only after
// the broker confirmed it. A row that fails (no queue took it, a nack, a
// timeout) gets attempts+1, last_error and a due_at pushed back by a capped
// exponential backoff, and the rest of the batch goes on; a batch with
// failures logs one line. Rows that failed before are published after the
// batch's first tries and, when there are few, one at a time, so that a
// poison row that makes the broker close the channel disturbs no other.
// After [MaxAttempts] failures the row is dead-lettered: dead_at is set and
// no relay touches it until [Outbox.Replay] (or `acemq outbox replay`)
// brings it back.
//
// The statements that settle a batch are retried after a failure, such as
// a lost database connection, before the rows are left to their lease, and
// they only touch rows that still hold the batch's lease. Delivery is at
// least once: a relay killed after a confirm and before the delete leaves
// the row to be sent again, with the same message ID, once its lease ends,
// so consumers should be idempotent (patterns.WithIdempotency with an
// Inbox).
//
// A relay whose ctx ends finishes its claim, starts no further publish,
// waits up to [StopTimeout] for the confirms outstanding, deletes what was
// confirmed and hands the rest back at once. There is no LISTEN/NOTIFY
// wake-up: relays poll.
//
// # SQLite
//
// SQLite allows one writer at a time. With database/sql, open the database
// with a busy timeout (modernc.org/sqlite: "file:app.db?_pragma=busy_timeout(5000)")
// and db.SetMaxOpenConns(1), and run one Relay per database file.
// Times are stored as Unix microseconds.
//
// # The inbox
//
// [Inbox] is a patterns.IdempotencyStore in the same database. With
// [Inbox.CompleteTx] a handler records its effects and marks the message handled
// in one transaction, so a redelivery after a crash either finds the
// effects and the completion or neither. [Inbox.ClaimTx] claims and
// completes a key inside the handler's transaction, in one statement, for
// handlers whose whole work is that transaction (package saga).
//
// # Metrics
//
// Through the OpenTelemetry metric API ([WithMeterProvider], else the global
// provider): acemq.outbox.pending (rows waiting), acemq.outbox.dead (rows
// dead-lettered), acemq.outbox.relayed, acemq.outbox.failed,
// acemq.outbox.dead_lettered and acemq.outbox.lag (seconds from due_at to
// the confirm), each with db.collection.name set to the table.
package outbox

// Package wire is acemq's one source of truth for what travels in AMQP:
// the header value model and its limits, and the two layers the RabbitMQ
// transport puts between the socket and amqp091-go.
//
// # Values
//
// [CheckValue] and [CheckHeaders] decide whether a header value can travel:
// the engine's Send, the outbox's write, the memory transport and the
// RabbitMQ transport all ask them, so a value one path refuses is refused
// by every path. The types are those of an AMQP field table as amqp091-go
// writes and reads them: nil, bool, the signed integers, uint8, uint16,
// uint32, float32, float64, string, []byte, [time.Time], [amqp091.Decimal],
// []any and map[string]any. uint, uint64 and []string are refused: a
// reader would get back another type than was sent. So are a NaN or
// infinite float, which RabbitMQ cannot parse (3.10 closes the connection
// with 541 INTERNAL_ERROR), and a time outside the years [MinYear] to
// [MaxYear], which the outbox, storing times as RFC 3339 text, could not
// read back. [MaxDepth], [MaxEntries] and [MaxShortString] are amqp091-go's
// reading limits; a message over them makes the reading connection fail as
// a whole.
//
// # The broker's rules
//
// [CheckMessage] and [CheckTopology] hold what RabbitMQ accepts in a
// publish and a declaration: names, keys and properties of at most 255
// bytes ([CheckShortString]) and argument tables whose names, count and
// values it can take ([CheckArgs]). Both transports run them in Publish and
// Declare, so a declaration or publish one transport accepts the other
// does, and nothing reaches amqp091-go that makes its writer fail and take
// the connection down. Each reason names the field and the limit.
//
// # The frame guard
//
// [NewGuard] wraps the socket amqp091-go reads from. It passes every frame
// through untouched except a content header whose headers table
// amqp091-go would refuse (too deep, too wide, an unknown type, a field
// running past its table): that table is replaced by the single header
// transport.UnreadableHeaders saying why, so the engine parks the message
// instead of the connection failing at every redelivery. It reads the same
// limits as [CheckValue].
//
// # Coalesced writes
//
// [NewBatchConn] wraps the socket amqp091-go writes to, and coalesces its
// per-publish flushes into fewer socket writes. Its Write returns once the
// bytes are queued, before they are on the socket. For callers this means:
// a publish amqp091-go reports written may still be lost with the
// connection (only a publisher confirm says the broker has it, which is
// why the transport waits for confirms); a socket error surfaces on a
// later Write, never the one whose bytes failed, and is sticky; and
// Close must be called to end the flusher goroutine, which it waits for.
package wire

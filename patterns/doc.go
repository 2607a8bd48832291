// Package patterns holds the messaging patterns a service builds on acemq,
// each in a file of its own and each made of the engine's public parts:
//
//   - [Chain] composes handler middleware, outermost first.
//   - [WithTimeout] bounds a handler's time; [WithIdempotency] runs a handler
//     once per message key, with a store to remember the keys ([MemoryStore]
//     here, an SQL one in package outbox).
//   - [Request] and [Reply] are request/response over RabbitMQ's direct
//     reply-to (emulated by the memory transport).
//   - [Replay] moves messages from a dead-letter or parking queue back to
//     work, confirmed before each original is acked.
//   - [Itinerary] and [Forward] are a routing slip: a message carries the list
//     of queues it still has to visit and each step forwards it to the next.
//   - [Bisect] turns a batch function that succeeds or fails as a whole (one
//     statement per batch) into a batch handler with an Ack per message, by
//     splitting the batch that fails until the bad messages are alone.
//
// Middleware is per-handler business; Conn-wide policy belongs in the
// engine's interceptors. A typical consumer reads:
//
//	handler := patterns.Chain(handle,
//		otel.Middleware[OrderPlaced](tracing, "orders"),
//		patterns.WithTimeout[OrderPlaced](10*time.Second),
//		patterns.WithIdempotency[OrderPlaced](store))
package patterns

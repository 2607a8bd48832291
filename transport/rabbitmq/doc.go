// Package rabbitmq is the acemq transport for RabbitMQ, built on
// github.com/rabbitmq/amqp091-go. Dial returns a *Transport, which
// implements transport.Transport; the engine (acemq.Connect with an amqp://
// or amqps:// URL) is its usual user, and no amqp091 type crosses its API.
//
// # Connection
//
// A Transport owns one AMQP connection at a time. Dial's URL is one
// amqp:// or amqps:// URL or a comma-separated list of them, the nodes of
// one cluster. Dial starts at a random node of the list, so the replicas
// of a service spread over the cluster, and goes round the list with
// capped backoff between rounds until a node accepts or its ctx ends; a
// refused login or vhost, or a certificate that does not verify, fails at
// once. Node names the node in use. Every error, log line and health
// report shows URLs with the password replaced by "xxxxx" (see Redact).
// amqps:// URLs use Config.TLS.
//
// # Publishing
//
// Publishes are always mandatory, persistent and confirmed. Config.Channels
// channels (two by default) are in confirm mode, each with one writer
// goroutine taking requests from a shared queue and one listener goroutine
// turning the broker's confirms and returns into outcomes. A caller queues
// its request and waits for the outcome; nobody holds a lock while a
// confirm is on its way, so many concurrent publishes share each round
// trip. The number of publishes queued or awaiting a confirm is capped by
// Config.ConfirmWindow (1024 by default): a stalled broker makes callers
// wait, each up to its ctx, instead of growing memory. While the broker
// blocks the connection (connection.blocked, a resource alarm) the writers
// hold back. A ctx that ends while its publish waits makes Publish return
// the ctx's error; the broker may still confirm that message later, but it
// was not reported sent. A caller waiting for room in the window holds no
// copy of its body: the copy is made once a token is taken, so the window
// bounds the memory publishes hold, whatever the number of callers.
//
// amqp091 flushes its buffer after every publish. The socket under it
// coalesces those flushes: a write is queued and handed to one flusher
// goroutine, which writes everything queued in one system call and keeps
// going while more arrives (at most 1 MiB is queued; beyond that writers
// wait, so TCP back-pressure still reaches them). Pipelined publishes thus
// leave in few large writes, which saves client and broker CPU per
// message; a lone publish only waits for the hand-off.
//
// A basic.return carries no delivery tag. amqp091 hands a return to the
// listener before the confirm that follows it on the same channel, so at
// that moment its publish is still in flight; the listener marks the
// earliest in-flight publish with the same exchange, routing key, message
// ID, correlation ID and body, and the confirm then fails it with
// transport.ErrUnroutable. Matching by ordering alone (the next confirm
// after a return) is not enough: amqp091 re-sequences confirms, so a
// slower, earlier publish can sit between the return and its confirm.
//
// # Consuming
//
// Each Consume has its own channel with the given prefetch and manual
// acknowledgements, and hands deliveries to its callback from one
// goroutine, in order. Ack and Nack record the settlement; the consume loop
// writes them, coalescing a settled run at the head into a single
// basic.ack with multiple=true. Settled deliveries waiting behind a slow
// one are written singly once they fill half the prefetch, so a slow
// message never shuts the window. When its ctx ends, Consume cancels the
// consumer, waits until every delivery it handed out is settled (those of
// a channel that died count as settled) and returns nil.
//
// # Headers amqp091 cannot read
//
// amqp091-go fails the whole connection when a message carries a headers
// table nested deeper than 32 levels, with more than 8,192 entries, or
// malformed, and the broker would deliver that message again after every
// reconnection. The socket is therefore read through a frame guard: every
// frame passes untouched (bodies are streamed, not copied) except a content
// header whose table amqp091 would refuse, which gets the single header
// transport.UnreadableHeaders in its place. The engine parks such a
// message. For amqps:// the guard sits above TLS, so this package does the
// TLS handshake itself rather than amqp091.
//
// # Reconnection
//
// amqp091-go v1.16 has an opt-in Config.Recovery that reconnects and
// replays recorded topology and consumers. This package does not use it and
// runs its own loop instead, because Recovery gives up after a bounded
// number of attempts at a fixed interval (the transport must retry forever
// with capped exponential backoff and jitter, from Config.MinBackoff to
// Config.MaxBackoff); because it revives the same *Channel values, so a
// delivery tag from before the loss would look valid on the recovered
// channel and could acknowledge a different message; and because
// confirmations in flight at the loss are dropped with no hook to send
// their messages again. The two mechanisms must never be combined.
//
// On a loss the loop marks the transport down (Health reports it, naming
// the node lost) and tries the other nodes of the list in turn, starting
// with the one after the lost node, pausing between full rounds, until one
// accepts or Close is called; it logs one line for the loss and one for
// the move, naming both nodes and how long the outage lasted. It then
// declares again everything Declare declared, in order, and only then
// lets writers and consumers onto the new connection. Publishes made meanwhile wait, each up to its ctx.
// Publishes in flight on a lost connection are sent again on the next one
// with the same message and ID (at-least-once) unless their caller has gone;
// a channel the broker closes for a reason that would recur (a missing
// exchange, say) fails the publishes it names instead. Every Consume starts
// again on the new connection. Each consumer channel is the acknowledger
// of the deliveries it handed out, so a delivery from before the loss is
// refused with an error rather than acknowledged on a newer channel; the
// broker redelivers it.
//
// # Topology and the rest
//
// Declare makes durable exchanges and queues (Queue.Quorum sets
// x-queue-type: quorum) and bindings, each call on a fresh channel since a
// refusal closes the channel. A queue declared again with other arguments
// fails wrapping transport.ErrTopologyConflict and the broker's
// *amqp091.Error. Get uses basic.get on one channel per connection, on
// which any number of messages may be held unsettled; a queue is looked up
// on a channel of its own before its first Get, so a missing one does not
// close the channel the held messages are on. Request uses RabbitMQ's direct reply-to: one channel
// consumes amq.rabbitmq.reply-to and publishes the requests, as the broker
// requires, and a dispatcher matches replies by correlation ID.
//
// # Logging and goroutines
//
// Config.Logger defaults to a handler that discards: a library should not
// write to the application's logs unless asked to. Every goroutine the
// transport starts (the supervisor, writers, listeners, the reply
// dispatcher) is owned by it and ends before Close returns.
package rabbitmq

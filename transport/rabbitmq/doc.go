// Package rabbitmq is the acemq transport for RabbitMQ, built on
// github.com/rabbitmq/amqp091-go. [Dial] returns a [*Transport], which
// implements [transport.Transport]; the engine (acemq.Connect with an
// amqp:// or amqps:// URL) is its usual user, and no amqp091 type crosses
// its API. How the transport works inside (the coalesced socket, the frame
// guard, how returns meet their confirms, the reconnection loop and why it
// is not amqp091's Recovery) is in docs/rabbitmq.md, "Inside the
// transport".
//
// # Connection
//
// A Transport owns one AMQP connection at a time. Dial's URL is one
// amqp:// or amqps:// URL or a comma-separated list of them, the nodes of
// one cluster. Dial starts at a random node of the list, so the replicas
// of a service spread over the cluster, and goes round the list with
// capped backoff between rounds until a node accepts or its ctx ends; a
// refused login or vhost, or a certificate that does not verify, fails at
// once. [Transport.Node] names the node in use. Every error, log line and
// health report shows URLs with the password replaced by "xxxxx" (see
// [Redact]). amqps:// URLs use [Config].TLS.
//
// # Publishing
//
// Publishes are always mandatory, persistent and confirmed, on one channel
// in confirm mode ([Config].Channels raises it); many concurrent publishes
// share each confirm round trip. The first publish to an exchange checks
// that it exists on a channel of its own, so a missing exchange fails that
// publish with [transport.ErrNotFound] and never closes the channel every
// publisher shares; a channel the broker closes anyway is reopened at once
// and what was unconfirmed on it is sent again. A publish the broker answers
// by closing the channel or connection with a reason that names nothing
// (a frame it cannot parse) is sent again alone, and fails with that reason
// once it was in flight at two such closures. Declare and Publish refuse,
// before the broker sees it, what it would refuse or mangle: names, keys
// and properties over 255 bytes, argument tables and header values it
// cannot take (internal/wire holds these rules for every acemq path). The number of
// publishes queued or awaiting a confirm is capped by [Config].ConfirmWindow
// (1024 by default): a stalled broker makes callers wait, each up to its
// ctx, instead of growing memory, and a caller waiting for room holds no
// copy of its body. While the broker blocks the connection
// (connection.blocked, a resource alarm) publishes wait. A ctx that ends
// while its publish waits makes [Transport.Publish] return the ctx's error;
// the broker may still confirm that message later, but it was not reported
// sent. A message no queue took fails with [transport.ErrUnroutable].
// Header values follow the rules every acemq path shares: uint, uint64 and
// []string are refused, as the engine refuses them.
//
// # Consuming
//
// Each [Transport.Consume] has its own channel with the given prefetch and
// manual acknowledgements, and hands deliveries to its callback from one
// goroutine, in order. Acks are coalesced into basic.ack with multiple=true
// where they can be, and a slow message never shuts the prefetch window.
// When its ctx ends, Consume cancels the consumer, waits until every
// delivery it handed out is settled (those of a channel that died count as
// settled) and returns nil.
//
// A message whose headers amqp091-go could not read (nested deeper than
// 32 levels, more than 8,192 entries, malformed) would fail the whole
// connection at every redelivery. It arrives instead with the single header
// [transport.UnreadableHeaders] saying why, and the engine parks it.
//
// The connection takes the broker's frame_max, whatever it is, rather than
// amqp091's default of 128 KiB: a broker configured above that sends a
// message whose headers are bigger in one frame, and a client that asked
// for less closes the connection on it, at every delivery of it. The engine
// then parks such a delivery (acemq.MaxHeaderSize).
//
// # Reconnection
//
// On a loss the transport marks itself down ([Transport.Health] reports it,
// naming the node lost, and [Transport.Subscription] reports every
// consumer of the lost connection not consuming since the loss) and tries the other nodes of the list in turn,
// forever, with capped exponential backoff and jitter from
// [Config].MinBackoff to [Config].MaxBackoff, until one accepts or
// [Transport.Close] is called. A connection that dies within 5 seconds of
// opening, again and again, starts each reconnect one backoff round
// further, so a fault that recurs on every connection is not met in a
// loop. It then declares again everything
// [Transport.Declare] declared, in order, before writers and consumers use
// the new connection. Publishes made meanwhile wait, each up to its ctx;
// publishes in flight on the lost connection are sent again with the same
// message and ID (at-least-once) unless their caller has gone. Every
// Consume starts again on the new connection, and a delivery from before
// the loss is refused by Ack and Nack with an error rather than
// acknowledged on a newer channel; the broker redelivers it. Do not turn
// on amqp091's own Config.Recovery beside it.
//
// # Topology and the rest
//
// [Transport.Declare] makes durable exchanges and queues (Queue.Quorum sets
// x-queue-type: quorum) and bindings. A queue declared again with other
// arguments fails wrapping [transport.ErrTopologyConflict] and the broker's
// *amqp091.Error. [Transport.Get] takes one message with basic.get, and any
// number may be held unsettled. [Transport.Request] uses RabbitMQ's direct
// reply-to.
//
// # Ordered consumers' parts
//
// Exchange.Args are sent as the exchange's arguments. An exchange of kind
// x-consistent-hash needs the broker plugin rabbitmq_consistent_hash_exchange;
// since a broker without it answers with a connection error, the first
// declaration of that kind goes over a short-lived connection of its own and
// fails naming the plugin and the rabbitmq-plugins command that enables it.
// [transport.ExchangeBinding]s are declared with exchange.bind and, like the
// rest of the topology, declared again after a reconnection;
// [Transport.DeleteExchange] forgets an exchange and its bindings.
// [Transport.Lease] holds an exclusive queue on the current connection,
// never declared again after a loss; [Transport.ConsumeHandOver] ends a
// single-active-consumer subscription by closing its channel without a
// cancel, once every delivery it handed out was settled or released, so the
// broker requeues the rest in order before activating the next consumer.
// [Transport.Fence] hands out fencing tokens: positions in the log of a
// stream queue named for the counter, which the broker assigns in order and
// never twice. [Transport.LastHeard] and [Transport.Timeout] tell how long
// the broker has been silent, by the socket's reads and the monotonic clock.
//
// # Logging and goroutines
//
// [Config].Logger defaults to a handler that discards: a library should not
// write to the application's logs unless asked to. Every goroutine the
// transport starts is owned by it and ends before Close returns.
package rabbitmq

// Package acemq publishes and consumes typed messages over RabbitMQ with the
// guarantees a service would otherwise build by hand: publisher confirms on
// every send, a retry ladder made of plain queues, dead-letter and parking
// queues, idempotent handlers, traces and metrics. It also runs on an
// in-process broker (memory:// URLs), the default for examples and tests.
//
// # Connecting
//
// [Connect] takes a URL and options that are fixed for the life of the [Conn]:
//
//	mq, err := acemq.Connect(ctx, "amqp://guest:guest@127.0.0.1:5672/",
//		acemq.WithPublishInterceptor(stampTenant("alpha")),
//		acemq.WithConsumeInterceptor(refuseOtherTenants("alpha")))
//
// amqp:// and amqps:// reach RabbitMQ; memory://NAME joins the in-process
// broker NAME. [Conn.Close] closes at once; [Conn.Shutdown] drains first.
//
// # Publishing
//
// A [Publisher][T] sends values of T to an exchange and routing key. [Publisher.Send]
// returns once the broker confirmed the message; every publish is mandatory,
// so a message no queue takes fails with [ErrUnroutable] instead of vanishing.
// [Publisher.SendAll] sends a batch with the publishes pipelined.
//
//	pub := acemq.NewPublisher[OrderPlaced](mq, "", "orders")
//	err := pub.Send(ctx, OrderPlaced{OrderID: "A-1"}, acemq.Header("x-region", "eu"))
//
// # Delivery later
//
// [After] and [At] delay a message: Send returns once the broker holds it,
// in a delay topology of plain TTL queues shared by the vhost (no plugin),
// and it is delivered, as it was sent, no earlier than its due time, which
// [Envelope].Due carries. Every Conn on the vhost forwards what is due, so
// the sending process may exit. A delayed message cannot be recalled; the
// outbox's scheduler keeps schedules that can be. docs/scheduling.md has
// the details.
//
//	err := pub.Send(ctx, Reminder{OrderID: "A-1"}, acemq.After(24*time.Hour))
//
// # Consuming
//
// A [Consumer][T] runs each delivery through the consume interceptors, the
// codec and its [Handler], on [Concurrency] worker goroutines. The handler's [Ack]
// decides the outcome: [Done] acks, [Retry] climbs the retry ladder, [Reject]
// dead-letters on purpose, [Park] sets aside a message the handler cannot
// read, and [Fatal] errors skip the ladder. Each delivery
// settles into one of five outcomes (acked, retried, rejected,
// dead_lettered, parked), reported to [OnSettled] hooks, to [WhenSettled]
// callbacks and on the engine's counters. A Consumer[T] takes messages of
// T's type name, of the names [AcceptTypes] adds, and with no type; a queue
// that carries several types is served by a [Router], one typed handler per
// type ([NewRouter], [Route]), with everything else a Consumer's.
// [NewConsumer] declares the queue and its ladder before it returns, so a
// publish right after it is routable; [DeclareContext] bounds that I/O by
// the caller's ctx. A handler that panics rejects its message (reason "the
// handler panicked: …"), and the panic's stack is logged once, at Error,
// with the message ID.
//
// # Batches
//
// [NewBatchConsumer] hands a [BatchHandler] up to [BatchSize] messages at
// once (a database written in one statement), gathered for at most
// [BatchWait] after the first. Each message still passes the interceptors,
// the checks and the decode on its own, and settles on its own by the [Ack]
// at its index, so one poison message ends in {queue}.dlq alone while the
// rest are acked. A handler that returns another number of Acks than
// messages, or panics, retries the whole batch, and says so at Error in the
// log. When Run stops, the batch being gathered goes to the handler and
// settles before Run returns; Pause, the kill switch and [Conn.Close] put
// it back on the queue instead.
//
// # The retry ladder
//
// A retry is a copy of the message, Attempt+1, published to a tier queue
// {queue}.retry.{delay} whose message TTL is the delay and which
// dead-letters back to {queue}. Only once the broker confirmed the copy is
// the original acked. When the attempts are spent the message goes to
// {queue}.dlq; a message that cannot be read at all (bad envelope, unknown
// content type, a body that does not decode or is too big) or is of a type
// the consumer does not take goes to {queue}.parked. If a move fails the
// delivery goes back to its queue: a message is never acked before its
// successor is safe. [RetryPolicy] sets the ladder, per Conn with
// [WithRetryPolicy] or per consumer with [WithConsumerRetry].
//
// # Pausing and the kill switch
//
// [Consumer.Pause] and [Consumer.Resume] (and the Router's) stop and restart taking
// deliveries without stopping Run. [KillSwitch] pauses a consumer by itself
// when, over a sliding window, too many deliveries fail (are retried, run
// out of attempts, or panic): the messages wait in their queue instead of
// climbing the ladder into {queue}.dlq while a dependency is down. After a
// cool-down a probe of a few deliveries decides whether it resumes.
//
// # Ordered keys
//
// [Ordered] makes a consumer (or a router) handle the messages of one key,
// set with the [Key] send option or a publisher's [KeyBy], one at a time and
// in the order they were sent, while other keys run concurrently. The
// consumer declares an x-consistent-hash exchange named after the queue
// (RabbitMQ's rabbitmq_consistent_hash_exchange plugin) that hashes the key
// into [OrderPolicy].Partitions single-active-consumer queues, and the
// instances consuming the queue spread those partitions among themselves
// through the broker ([Consumer.Partitions] says which this one holds).
// Retries happen in place, the key waiting. With BlockOnFailure a message
// that fails for good blocks its key: its later messages are held on the
// broker until [ReleaseKey], which with [RerunFailed] runs the message that
// blocked it first; [BlockedKeys] lists the blocked ones. A message without
// a key is parked (its publisher forgot [Key] or [KeyBy]) unless
// [OrderPolicy].AllowKeyless.
// Every delivery carries its partition and a fencing token
// ([Message.Fence]) that grows with each change of the partition's holder,
// so a store can refuse the writes of a holder that was replaced; the
// handler's ctx is cancelled ([ErrPartitionLost]) once the instance knows
// it lost the partition, by its own clock too. docs/ordering.md tells the
// whole story.
//
// # Health
//
// [Conn.Health] is nil while the connection is up and every consumer runs
// and consumes; otherwise its error wraps [ErrUnavailable] (the
// transport's trouble: a consumer whose subscription is down is waiting),
// [ErrNotRunning] (made and never run, or its Run returned), [ErrPaused]
// (Pause), [ErrTripped] (the kill switch), [ErrStuck] (a handler held a
// delivery longer than [StuckAfter]) or [ErrFaulted] (a Run that returned
// an error, a Router with an invalid route) and names the queue.
// [Conn.HealthReport] breaks it down: the connection, and one
// [ConsumerHealth] per Consumer, batch consumer or Router made on the
// Conn, from its constructor until its Close or the Conn's, with its state
// (starting, consuming, waiting, paused, tripped, stuck, faulted,
// stopped), since when, how long its oldest delivery has been in a
// handler, and an ordered one's partitions. A [Nonessential] consumer is
// in the report but not in Health; a consumer stopped for good is closed
// with [Consumer.Close] (or [Router.Close]) and leaves both.
//
// # Interceptors and middleware
//
// Interceptors are Conn-wide policy written as closures: a
// [PublishInterceptor] sees and may change every message before it is
// encoded, and its error is returned by Send as it is; a [ConsumeInterceptor]
// sees every delivery before it is decoded, and its error dead-letters it.
// They run in the order given and only on the way in. Per-handler concerns
// (timeouts, idempotency, tracing) are [Middleware], composed with
// patterns.Chain. [Conn.PublishRaw], which the engine's own moves use,
// bypasses the publish chain.
//
// # The envelope
//
// Every message carries an [Envelope] (ID, Type, Version, CorrelationID,
// CausationID, Attempt, FirstSeen, Origin, Error and the application's
// Headers). On the wire (format v2) its fields travel in the AMQP
// properties wherever AMQP has one (message-id, type, correlation-id,
// timestamp, app-id, reply-to), so any AMQP client reads them; only
// Version, CausationID, Attempt, Error and Key travel as reserved x-acemq-
// headers, and only when they differ from the default (Key: when set). Messages written by
// earlier builds, with every field in a header, are read too. A message
// from another producer gets its envelope from its AMQP properties; one
// whose reserved headers are damaged is parked with the reason.
//
// # Encrypted bodies
//
// [WithBodyCipher] seals every body a Conn encodes and opens every body it
// decodes, with a [BodyCipher] (package crypt: AES-256-GCM under Tink
// keysets). The key's ID travels in the reserved header [CipherHeader];
// the envelope stays readable; its ID and type are the associated data. A
// body that does not open is parked with the reason. docs/encryption.md
// has the whole story.
//
// # Errors
//
// Each package of the module prefixes the errors it makes with its own name,
// once, at the front: "acemq: " here (the sentinels [ErrClosed],
// [ErrUnroutable], [ErrNacked], [ErrTopologyConflict], [ErrNotFound] and
// [ErrFatal] among them), "transport: " for the transport contract's
// sentinels (which errors.Is matches with this package's of the same
// names, either way), "rabbitmq: " and "memory: " for the transports,
// "outbox: ", "saga: ", "patterns: " for theirs. An error met on the way is
// wrapped with %w as its cause and its text is left as its maker wrote it,
// so one message may read "acemq: publishing …: rabbitmq: publish to …: no
// queue took the message (312 NO_ROUTE)". Texts are for people:
// test for a kind of error with [errors.Is] and [errors.As], never by text.
// A publish interceptor's error is returned as it is, not wrapped.
//
// # Metrics
//
// The engine records, through the OpenTelemetry metric API,
// acemq.publish.total, acemq.publish.duration, acemq.consume.total,
// acemq.consume.duration, acemq.messages.dead.lettered.total,
// acemq.consumer.paused, acemq.consumer.blocked_keys and
// acemq.consumer.keyless.total (ordered consumers),
// acemq.consume.batch.size and acemq.consumer.delay.lateness (delayed
// messages), from the MeterProvider
// [WithMeterProvider] gives.
// Tracing is a wrapper in package acemq/otel.
package acemq

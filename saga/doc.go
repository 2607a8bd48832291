// Package saga keeps the state of long conversations — an order waiting
// for its payment and its stock — in the service's own database, one row
// per correlation ID, and runs each step of one in a single transaction
// with the messages it sends and the record that its message was handled.
// Deliveries are at least once; a step's effects happen exactly once.
//
// A [Saga] lives beside an [outbox.Outbox], in its database and dialect
// (PostgreSQL or SQLite): New takes the outbox, Migrate creates the table
// acemq_saga_<name>. [Handle] turns a [Step] into an acemq.Handler:
//
//	checkout, err := saga.New[Checkout](ob, "checkout")
//	h := saga.Handle(checkout, func(m *acemq.Message[OrderPlaced]) string { return m.Payload.OrderID },
//		func(ctx context.Context, in *saga.Instance[Checkout], m *acemq.Message[OrderPlaced]) error {
//			in.State.Status = "awaiting payment"
//			return payments.Send(ctx, in.Tx, ChargeCard{OrderID: in.ID}) // an outbox.Publisher
//		}, saga.Starts())
//
// # One transaction per delivery
//
// For each delivery the handler begins a transaction, claims the message's
// ID in the outbox's inbox ([outbox.Inbox.ClaimTx]), loads the instance,
// runs the step, saves the state as JSON with an optimistic version check
// (or inserts a new instance), commits, and only then acks. A duplicate is
// acked and changes nothing; a step error rolls back everything the step
// wrote, messages included, and becomes acemq.AckOf(err); a version
// conflict reruns the step on the fresh state up to [MaxReruns] times, then
// the message is retried. A message for a completed instance is acked
// unhandled; one for no instance is rejected unless the handler was given
// [Starts]. A stored state that no longer decodes into S is parked with
// acemq.Park, the reason naming the saga, the ID and the decode error.
// Consumed by an ordered consumer, the row keeps the highest fencing token
// (acemq.Message.Fence) that saved it and the save is conditional on it: a
// step of a stale holder of the partition does not run and saves nothing,
// and its message goes back for the current holder (see docs/ordering.md,
// Fencing).
//
// # Mistakes found early
//
// [Saga.Check] fails, with an error wrapping [ErrNotMigrated] that names
// the table and says to call Migrate, when the saga's or its inbox's table
// does not exist; a handler checks by itself until a check passes, and
// retries its messages meanwhile. A step that panics is recovered by the
// handler, which logs its stack once at Error ([WithLogger]) with the
// message ID and the correlation ID, and rejects the message.
//
// # Timeouts
//
// A timeout is a message the step schedules with outbox.After (or
// outbox.At) to its own saga; its step acts only if the instance is still
// waiting. docs/sagas.md shows the pattern, and pairing a saga with an
// ordered consumer so one instance's messages never race.
//
// # Metrics
//
// acemq.saga.steps counts step runs by acemq.saga.outcome (committed,
// duplicate, conflict_retried, failed) and acemq.saga.open gauges the
// instances not completed, both with acemq.saga.name, created with the
// outbox's meter provider unless [WithMeterProvider] says otherwise.
package saga

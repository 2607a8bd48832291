package acemq

import "time"

// Outcome is how a delivery was settled. The same word is used by the
// counters, the spans and the settlements.
type Outcome string

// The five outcomes.
const (
	OutcomeAcked        Outcome = "acked"         // handled
	OutcomeRetried      Outcome = "retried"       // sent to a retry tier, to come back
	OutcomeRejected     Outcome = "rejected"      // sent to {queue}.dlq by the handler's choice
	OutcomeDeadLettered Outcome = "dead_lettered" // sent to {queue}.dlq: attempts spent, fatal, or refused
	OutcomeParked       Outcome = "parked"        // sent to {queue}.parked: unreadable
)

// Settlement reports how one delivery ended.
type Settlement struct {
	Queue    string
	Envelope *Envelope
	Outcome  Outcome
	Reason   string        // why, for every outcome but acked
	Delay    time.Duration // the retry delay chosen; zero otherwise
	Attempt  int           // the attempt of the delivery that settled (1 for the first)
	Ack      Ack           // what the handler asked for (Kind AckNone when it did not run)
	// Redelivered says the broker delivered the message before and it was
	// not settled then: a consumer died holding it (a crash, a SIGKILL, a
	// lost connection), or a consumer gave it back (a pause, a move that
	// failed, a shutdown with prefetched deliveries). Attempt does not
	// count such a delivery: it counts the ladder's attempts, and a pause
	// must not spend them. acemq.consume.redelivered.total counts them, by
	// outcome; see docs/consuming.md, "Redeliveries".
	Redelivered bool
}

// DeadLetters reports whether the delivery went to the dead-letter queue:
// true for rejected and dead_lettered, false for parked.
func (s Settlement) DeadLetters() bool {
	return s.Outcome == OutcomeRejected || s.Outcome == OutcomeDeadLettered
}

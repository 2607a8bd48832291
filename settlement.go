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
}

// DeadLetters reports whether the delivery went to the dead-letter queue:
// true for rejected and dead_lettered, false for parked.
func (s Settlement) DeadLetters() bool {
	return s.Outcome == OutcomeRejected || s.Outcome == OutcomeDeadLettered
}

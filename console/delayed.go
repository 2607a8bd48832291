package console

import (
	"context"
	"time"

	"github.com/acemq/acemq/internal/delay"
)

// delayedLevel is one level of the delay topology holding messages.
type delayedLevel struct {
	Queue    string `json:"queue"`
	Waits    string `json:"waits"` // the level's TTL
	Messages int    `json:"messages"`
}

// delayed is what waits in the vhost's delay topology (SPEC §20), as
// acemq stats shows it.
type delayed struct {
	// Absent is set when the vhost has no delay topology: no delayed
	// message was ever sent on it.
	Absent  bool           `json:"absent,omitempty"`
	Waiting int            `json:"waiting"`
	Levels  []delayedLevel `json:"levels"`
	// Due, on DueQueue, wait for one of the Forwarders.
	Due        int    `json:"due"`
	DueQueue   string `json:"dueQueue"`
	Forwarders int    `json:"forwarders"`
	// Unroutable delayed messages found no queue at their due time.
	Unroutable      int    `json:"unroutable"`
	UnroutableQueue string `json:"unroutableQueue"`
	// SoonestWithin bounds when the soonest waiting message is due, and
	// SoonestBy is the read's time plus it; both are empty when nothing
	// waits.
	SoonestWithin string     `json:"soonestWithin,omitempty"`
	SoonestBy     *time.Time `json:"soonestBy,omitempty"`
	Err           string     `json:"error,omitempty"`
}

// delayedNow reads the delay topology's counts at now.
func (c *console) delayedNow(ctx context.Context, now time.Time) delayed {
	d := delayed{Levels: []delayedLevel{}, DueQueue: delay.DueQueue, UnroutableQueue: delay.UnroutableQueue}
	counts, ok, err := delay.ReadCounts(ctx, c.conn.Transport())
	switch {
	case err != nil:
		d.Err = "acemq: console: " + err.Error()
		return d
	case !ok:
		d.Absent = true
		return d
	}
	d.Waiting, d.Due, d.Forwarders, d.Unroutable = counts.Waiting, counts.Due, counts.Forwarders, counts.Unroutable
	for _, l := range counts.Levels {
		d.Levels = append(d.Levels, delayedLevel{Queue: l.Queue, Waits: l.TTL.String(), Messages: l.Messages})
	}
	if counts.Soonest >= 0 {
		by := now.Add(counts.Soonest)
		d.SoonestWithin, d.SoonestBy = counts.Soonest.String(), &by
	}
	return d
}

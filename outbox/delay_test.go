package outbox_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/require"
)

// An outbox Publisher given acemq.After relays the row at once into the
// broker's delay: the table empties before the due time, and the message
// arrives no earlier than it, with Envelope.Due and its ID.
func TestOutboxRowWithAfterWaitsInTheBrokerNotTheTable(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		o := newOutbox(t, db, d)
		c := connect(t, acemqtest.Memory(t))
		col := collect(t, c, "orders")
		p := outbox.NewPublisher[Order](o, c, "", "orders")
		runUntilCleanup(t, outbox.NewRelay(o, c, outbox.PollInterval(fastPoll), outbox.WithLogger(quiet)).Run)

		const delay = 2 * time.Second
		written := time.Now()
		write(t, db, p, []acemq.SendOption{acemq.After(delay), acemq.MessageID("outbox-delayed")}, Order{ID: "later"})
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+o.TableName()).Scan(&n))
			return n == 0
		}, delay, 5*time.Millisecond, "the row waited in the table")
		require.Empty(t, col.all(), "delivered before its due time")
		col.waitUnique(t, 1, 10*time.Second)
		r, ok := col.byOrder("later")
		require.True(t, ok)
		require.Equal(t, "outbox-delayed", r.env.ID)
		require.False(t, r.at.Before(written.Add(delay)), "delivered %s early", written.Add(delay).Sub(r.at))
		require.WithinDuration(t, written.Add(delay), r.env.Due, time.Second)
	})
}

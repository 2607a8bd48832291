package outbox_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSendRefusesBadValuesAndLeavesTheTransactionUsable(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		o := newOutbox(t, db, d)
		c := connect(t, acemqtest.Memory(t))
		orders := outbox.NewPublisher[Order](o, c, "", "orders")
		long := strings.Repeat("k", 256)
		tests := []struct {
			name string
			pub  *outbox.Publisher[Order]
			opts []acemq.SendOption
			want string
			// acemq: the Conn's Prepare refuses it, with acemq's error;
			// otherwise the outbox's own check does, with ErrInvalid.
			acemq bool
		}{
			{name: "NUL in the message ID", pub: orders, opts: []acemq.SendOption{acemq.MessageID("a\x00b")}, want: `message ID "a\x00b" holds a NUL byte`},
			{name: "message ID not UTF-8", pub: orders, opts: []acemq.SendOption{acemq.MessageID("a\xffb")}, want: `message ID "a\xffb" is not valid UTF-8`},
			{name: "message ID too long", pub: orders, opts: []acemq.SendOption{acemq.MessageID(long)}, want: "ID is 256 bytes", acemq: true},
			{name: "NUL in the routing key", pub: outbox.NewPublisher[Order](o, c, "", "q\x00"), want: `routing key "q\x00" holds a NUL byte`},
			{name: "routing key too long", pub: outbox.NewPublisher[Order](o, c, "", long), want: "routing key is 256 bytes", acemq: true},
			{name: "exchange not UTF-8", pub: outbox.NewPublisher[Order](o, c, "\xfe", "q"), want: `exchange "\xfe" is not valid UTF-8`},
			{name: "correlation ID not UTF-8", pub: orders, opts: []acemq.SendOption{acemq.CorrelationID("\xc3")}, want: `correlation ID "\xc3" is not valid UTF-8`},
			{name: "At in the year 300000", pub: orders, opts: []acemq.SendOption{outbox.At(time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC))}, want: "after the year 9999"},
			{name: "header of a type AMQP cannot carry", pub: orders, opts: []acemq.SendOption{acemq.Header("h", struct{}{})}, want: `header "h"`, acemq: true},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				tx, err := db.BeginTx(t.Context(), nil)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback() }()
				err = tc.pub.Send(t.Context(), tx, Order{ID: "bad"}, tc.opts...)
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.want)
				if tc.acemq {
					assert.True(t, strings.HasPrefix(err.Error(), "acemq: "), err.Error())
					assert.NotErrorIs(t, err, outbox.ErrInvalid)
				} else {
					assert.True(t, strings.HasPrefix(err.Error(), "outbox: invalid message: "), err.Error())
					assert.ErrorIs(t, err, outbox.ErrInvalid)
				}
				assert.False(t, strings.ContainsFunc(err.Error(), unicode.IsControl), "a control byte in %q", err.Error())
				assert.NotContains(t, err.Error(), "\ufffd")

				// The transaction is still good: the next Send and the commit work.
				require.NoError(t, orders.Send(t.Context(), tx, Order{ID: "good"}))
				require.NoError(t, tx.Commit())
				ids := storedIDs(t, db, o)
				require.Len(t, ids, 1)
				_, err = db.ExecContext(t.Context(), "DELETE FROM "+o.TableName())
				require.NoError(t, err)
			})
		}
	})
}

func TestSendAcceptsStringsTheDatabaseCanHold(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		o := newOutbox(t, db, d)
		c := connect(t, acemqtest.Memory(t))
		p := outbox.NewPublisher[Order](o, c, "", strings.Repeat("k", 255))
		write(t, db, p, []acemq.SendOption{acemq.MessageID("id→ü"), acemq.CorrelationID("c\x00d"),
			outbox.At(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))}, Order{ID: "x"})
		assert.Equal(t, []string{"id→ü"}, storedIDs(t, db, o))
	})
}

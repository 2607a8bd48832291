package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSendRolledBackPublishesNothing(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		o := newOutbox(t, db, d)
		c := connect(t, acemqtest.Memory(t))
		col := collect(t, c, "orders")
		p := outbox.NewPublisher[Order](o, c, "", "orders")

		tx, err := db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		require.NoError(t, p.Send(t.Context(), tx, Order{ID: "o-1"}))
		require.NoError(t, tx.Rollback())

		runUntilCleanup(t, outbox.NewRelay(o, c, outbox.PollInterval(10*time.Millisecond), outbox.WithLogger(quiet)).Run)
		time.Sleep(200 * time.Millisecond)
		u, _ := col.unique()
		assert.Zero(t, u, "a rolled-back message was published")
		n, err := o.Pending(t.Context())
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}

func TestSendCommittedPublishesOnceWithItsIDAndInterceptorHeaders(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		o := newOutbox(t, db, d)
		stamp := func(_ context.Context, pc *acemq.PublishContext) error {
			pc.SetHeader("x-tenant", "acme")
			pc.SetHeader("x-seq", int32(7))
			return nil
		}
		c := connect(t, acemqtest.Memory(t), acemq.WithPublishInterceptor(stamp))
		col := collect(t, c, "orders")
		p := outbox.NewPublisher[Order](o, c, "", "orders", acemq.SchemaVersion(3))

		write(t, db, p, []acemq.SendOption{acemq.CorrelationID("corr-1"), acemq.Header("x-app", []byte{1, 2})}, Order{ID: "o-1", Cents: 42})
		ids := storedIDs(t, db, o)
		require.Len(t, ids, 1)

		runUntilCleanup(t, outbox.NewRelay(o, c, outbox.PollInterval(10*time.Millisecond), outbox.WithLogger(quiet)).Run)
		col.waitUnique(t, 1, 5*time.Second)
		time.Sleep(150 * time.Millisecond) // time for a second copy to show up
		got := col.all()
		require.Len(t, got, 1, "published more than once")
		env := got[0].env
		assert.Equal(t, ids[0], env.ID)
		assert.Equal(t, "Order", env.Type)
		assert.Equal(t, 3, env.Version)
		assert.Equal(t, "corr-1", env.CorrelationID)
		assert.Equal(t, "acme", env.Headers["x-tenant"])
		assert.Equal(t, int32(7), env.Headers["x-seq"])
		assert.Equal(t, []byte{1, 2}, env.Headers["x-app"])
		require.Eventually(t, func() bool { return len(storedIDs(t, db, o)) == 0 }, 2*time.Second, 5*time.Millisecond,
			"the relayed row was not deleted")
	})
}

func TestSendRefusedByAnInterceptorWritesNothing(t *testing.T) {
	refusal := errors.New("too big to publish")
	c := connect(t, acemqtest.Memory(t), acemq.WithPublishInterceptor(func(context.Context, *acemq.PublishContext) error {
		return refusal
	}))
	db := openSQLite(t)
	o := newOutbox(t, db, outbox.SQLite)
	p := outbox.NewPublisher[Order](o, c, "", "orders")

	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	err = p.Send(t.Context(), tx, Order{ID: "o-1"})
	require.NoError(t, tx.Commit())
	assert.True(t, err == refusal, "want the interceptor's very error, got %v", err) //nolint:errorlint // identity is the contract
	assert.Empty(t, storedIDs(t, db, o))
}

func TestSendRejectsBadInput(t *testing.T) {
	db := openSQLite(t)
	o := newOutbox(t, db, outbox.SQLite)
	c := connect(t, acemqtest.Memory(t))
	tests := []struct {
		name string
		pub  *outbox.Publisher[Order]
		noTx bool
		opts []acemq.SendOption
		want string
	}{
		{name: "nil tx", pub: outbox.NewPublisher[Order](o, c, "", "q"), noTx: true, want: "outbox: Send to table " + o.TableName() + " was given a nil *sql.Tx"},
		{name: "nil outbox", pub: outbox.NewPublisher[Order](nil, c, "", "q"), want: "outbox: Send on a Publisher without an Outbox"},
		{name: "nil conn", pub: outbox.NewPublisher[Order](o, nil, "", "q"), want: "outbox: Send to table " + o.TableName() + " on a Publisher without a Conn"},
		{name: "zero At", pub: outbox.NewPublisher[Order](o, c, "", "q"), opts: []acemq.SendOption{outbox.At(time.Time{})}, want: "outbox: invalid message: At was given the zero time"},
		// The Conn's Prepare refuses it: acemq's own error, as it is.
		{name: "reserved header", pub: outbox.NewPublisher[Order](o, c, "", "q"), opts: []acemq.SendOption{acemq.Header("x-acemq-id", "x")}, want: `acemq: header "x-acemq-id" is in the reserved namespace x-acemq-`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			real, err := db.BeginTx(t.Context(), nil)
			require.NoError(t, err)
			defer func() { _ = real.Rollback() }()
			tx := real
			if tc.noTx {
				tx = nil
			}
			err = tc.pub.Send(t.Context(), tx, Order{ID: "x"}, tc.opts...)
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), tc.want), "%q does not begin %q", err, tc.want)
		})
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	db := openSQLite(t)
	tests := []struct {
		name    string
		db      *sql.DB
		dialect outbox.Dialect
		opts    []outbox.Option
		want    string
	}{
		{name: "nil db", dialect: outbox.SQLite, want: "nil *sql.DB"},
		{name: "zero dialect", db: db, want: "want outbox.Postgres or outbox.SQLite"},
		{name: "table starting with a digit", db: db, dialect: outbox.SQLite, opts: []outbox.Option{outbox.Table("1outbox")}, want: "not a plain SQL identifier"},
		{name: "table with SQL in it", db: db, dialect: outbox.Postgres, opts: []outbox.Option{outbox.Table("x; DROP TABLE y")}, want: "not a plain SQL identifier"},
		{name: "schema-qualified table", db: db, dialect: outbox.Postgres, opts: []outbox.Option{outbox.Table("app.outbox")}, want: "search_path"},
		{name: "empty table", db: db, dialect: outbox.SQLite, opts: []outbox.Option{outbox.Table("")}, want: "not a plain SQL identifier"},
		{name: "table too long", db: db, dialect: outbox.SQLite, opts: []outbox.Option{outbox.Table("t234567890123456789012345678901234567890123456789")}, want: "at most 48"},
		{name: "nil option", db: db, dialect: outbox.SQLite, opts: []outbox.Option{nil}, want: "nil Option"},
		{name: "nil meter provider", db: db, dialect: outbox.SQLite, opts: []outbox.Option{outbox.WithMeterProvider(nil)}, want: "WithMeterProvider"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := outbox.New(tc.db, tc.dialect, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, o)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "outbox: "), err.Error())
			in, err := outbox.NewInbox(tc.db, tc.dialect, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, in)
		})
	}
}

func TestDefaultTableNames(t *testing.T) {
	db := openSQLite(t)
	o, err := outbox.New(db, outbox.SQLite)
	require.NoError(t, err)
	defer func() { require.NoError(t, o.Close()) }()
	in, err := outbox.NewInbox(db, outbox.SQLite)
	require.NoError(t, err)
	assert.Equal(t, "acemq_outbox", o.TableName())
	assert.Equal(t, "acemq_inbox", in.TableName())
	assert.Equal(t, "postgres", outbox.Postgres.String())
	assert.Equal(t, "sqlite", outbox.SQLite.String())
}

package saga_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/patterns"
	"github.com/acemq/acemq/saga"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Checkout is the state most tests keep.
type Checkout struct {
	Status string   `json:"status"`
	Steps  []string `json:"steps"`
}

// Event is the message most tests handle.
type Event struct {
	Kind string `json:"kind"`
}

// Notice is what the steps send through the outbox.
type Notice struct {
	OrderID, Kind string
}

func TestNewRefusesWhatItCannotUse(t *testing.T) {
	t.Parallel()
	db := openSQLite(t)
	ob, err := outbox.New(db, outbox.SQLite)
	require.NoError(t, err)
	defer ob.Close()
	tests := []struct {
		name string
		saga string
		ob   *outbox.Outbox
		opts []saga.Option
		want string
	}{
		{name: "empty name", saga: "", ob: ob, want: `saga: the name "" is not made of a-z, 0-9 and _`},
		{name: "capitals", saga: "Checkout", ob: ob, want: `the name "Checkout" is not made of a-z, 0-9 and _`},
		{name: "a dash", saga: "check-out", ob: ob, want: `the name "check-out"`},
		{name: "a quote", saga: `x"; DROP TABLE t; --`, ob: ob, want: `is not made of a-z, 0-9 and _`},
		{name: "too long", saga: strings.Repeat("a", 41), ob: ob, want: "(1 to 40 characters)"},
		{name: "nil outbox", saga: "checkout", want: "saga: New was given a nil *outbox.Outbox"},
		{name: "nil option", saga: "checkout", ob: ob, opts: []saga.Option{nil}, want: `saga: New of "checkout": a nil Option was given`},
		{name: "nil meter provider", saga: "checkout", ob: ob, opts: []saga.Option{saga.WithMeterProvider(nil)}, want: "WithMeterProvider was given nil"},
		{name: "nil inbox", saga: "checkout", ob: ob, opts: []saga.Option{saga.WithInbox(nil)}, want: "WithInbox was given nil"},
		{name: "no keep", saga: "checkout", ob: ob, opts: []saga.Option{saga.InboxKeep(0)}, want: "InboxKeep was given 0s; want a positive duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := saga.New[Checkout](tt.ob, tt.saga, tt.opts...)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	s, err := saga.New[Checkout](ob, "checkout_2", saga.InboxKeep(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, "acemq_saga_checkout_2", s.TableName())
	assert.Equal(t, "checkout_2", s.Name())
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
}

// recorder is a step that appends the message's kind to the state and
// sends a Notice through the outbox, and counts its runs.
type recorder struct {
	pub  *outbox.Publisher[Notice]
	runs atomic.Int64
	news atomic.Int64
	fail func(m *acemq.Message[Event]) error // nil: never
}

func (r *recorder) step(ctx context.Context, in *saga.Instance[Checkout], m *acemq.Message[Event]) error {
	r.runs.Add(1)
	if in.New() {
		r.news.Add(1)
	}
	in.State.Steps = append(in.State.Steps, m.Payload.Kind)
	if err := r.pub.Send(ctx, in.Tx, Notice{OrderID: in.ID, Kind: m.Payload.Kind}, acemq.MessageID("out-"+m.Envelope.ID)); err != nil {
		return err
	}
	if m.Payload.Kind == "shipped" {
		in.Complete()
	}
	if r.fail != nil {
		return r.fail(m)
	}
	return nil
}

func TestAStepsLife(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		ctx := t.Context()
		f := newFixture[Checkout](t, db, d)
		name := f.saga.Name()
		mq := connect(t, acemqtest.Memory(t))
		r := &recorder{pub: outbox.NewPublisher[Notice](f.ob, mq, "", "notices")}
		starts := saga.Handle(f.saga, byCorrelationID[Event], r.step, saga.Starts())
		follows := saga.Handle(f.saga, byCorrelationID[Event], r.step)

		// No instance, and a handler that may not start one: rejected,
		// naming the saga and the ID; nothing was written.
		ack := follows(ctx, message("m-0", "o-42", Event{Kind: "paid"}))
		require.Equal(t, acemq.AckReject, ack.Kind())
		assert.EqualError(t, ack.Err(), fmt.Sprintf(`no saga %q with correlation ID "o-42"`, name))
		assert.ErrorIs(t, ack.Err(), saga.ErrNotFound)
		assert.Zero(t, r.runs.Load())
		_, err := f.saga.Get(ctx, "o-42")
		assert.ErrorIs(t, err, saga.ErrNotFound)
		assert.EqualError(t, err, fmt.Sprintf(`saga: no saga %q with correlation ID "o-42"`, name))

		// Started.
		before := time.Now().Add(-time.Second)
		require.Equal(t, acemq.AckDone, starts(ctx, message("m-1", "o-42", Event{Kind: "placed"})).Kind())
		snap, err := f.saga.Get(ctx, "o-42")
		require.NoError(t, err)
		assert.Equal(t, "o-42", snap.ID)
		assert.Equal(t, []string{"placed"}, snap.State.Steps)
		assert.Equal(t, int64(1), snap.Version)
		assert.False(t, snap.Done)
		assert.True(t, snap.Created.After(before), "created %v", snap.Created)
		assert.Equal(t, snap.Created, snap.Updated)
		assert.Equal(t, int64(1), r.news.Load())

		// A step on it; then the same message again changes nothing.
		require.Equal(t, acemq.AckDone, follows(ctx, message("m-2", "o-42", Event{Kind: "paid"})).Kind())
		require.Equal(t, acemq.AckDone, follows(ctx, message("m-2", "o-42", Event{Kind: "paid"})).Kind())
		require.Equal(t, acemq.AckDone, starts(ctx, message("m-1", "o-42", Event{Kind: "placed"})).Kind())
		assert.Equal(t, int64(2), r.runs.Load(), "duplicates run no step")
		snap, err = f.saga.Get(ctx, "o-42")
		require.NoError(t, err)
		assert.Equal(t, []string{"placed", "paid"}, snap.State.Steps)
		assert.Equal(t, int64(2), snap.Version)
		assert.False(t, snap.Updated.Before(snap.Created))

		// A failing step rolls back its state and its message; the same
		// message then runs again, since its claim rolled back too.
		boom := errors.New("the warehouse is down")
		r.fail = func(*acemq.Message[Event]) error { return boom }
		ack = follows(ctx, message("m-3", "o-42", Event{Kind: "packed"}))
		require.Equal(t, acemq.AckRetry, ack.Kind())
		assert.ErrorIs(t, ack.Err(), boom)
		r.fail = func(*acemq.Message[Event]) error { return acemq.Fatal(boom) }
		assert.Equal(t, acemq.AckFatal, follows(ctx, message("m-3", "o-42", Event{Kind: "packed"})).Kind())
		assert.Zero(t, f.outboxIDs(t)["out-m-3"], "a failed step sends nothing")
		r.fail = nil
		require.Equal(t, acemq.AckDone, follows(ctx, message("m-3", "o-42", Event{Kind: "packed"})).Kind())

		// Complete; later messages are acked without a step.
		require.Equal(t, acemq.AckDone, follows(ctx, message("m-4", "o-42", Event{Kind: "shipped"})).Kind())
		runs := r.runs.Load()
		require.Equal(t, acemq.AckDone, follows(ctx, message("m-5", "o-42", Event{Kind: "late"})).Kind())
		require.Equal(t, acemq.AckDone, starts(ctx, message("m-6", "o-42", Event{Kind: "late"})).Kind())
		assert.Equal(t, runs, r.runs.Load(), "a completed saga runs no step")
		snap, err = f.saga.Get(ctx, "o-42")
		require.NoError(t, err)
		assert.True(t, snap.Done)
		assert.Equal(t, []string{"placed", "paid", "packed", "shipped"}, snap.State.Steps)
		assert.Equal(t, int64(4), snap.Version)
		assert.Equal(t, map[string]int{"out-m-1": 1, "out-m-2": 1, "out-m-3": 1, "out-m-4": 1}, f.outboxIDs(t))

		// A message without a correlation ID is rejected.
		ack = starts(ctx, message("m-7", "", Event{Kind: "placed"}))
		require.Equal(t, acemq.AckReject, ack.Kind())
		assert.EqualError(t, ack.Err(), fmt.Sprintf(`saga %q: message "m-7" has no correlation ID`, name))

		// List and CountOpen.
		require.Equal(t, acemq.AckDone, starts(ctx, message("m-8", "o-43", Event{Kind: "placed"})).Kind())
		open, err := f.saga.CountOpen(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(1), open)
		all, err := f.saga.List(ctx, saga.ListOptions{})
		require.NoError(t, err)
		require.Len(t, all, 2)
		assert.Equal(t, "o-42", all[0].ID, "the least recently updated first")
		openOnes, err := f.saga.List(ctx, saga.ListOptions{Open: true, Limit: 10})
		require.NoError(t, err)
		require.Len(t, openOnes, 1)
		assert.Equal(t, "o-43", openOnes[0].ID)
		_, err = f.saga.List(ctx, saga.ListOptions{Limit: -1})
		assert.ErrorContains(t, err, "was given limit -1")
	})
}

func TestHandleWithoutItsParts(t *testing.T) {
	t.Parallel()
	f := newFixture[Checkout](t, openSQLite(t), outbox.SQLite)
	step := func(context.Context, *saga.Instance[Checkout], *acemq.Message[Event]) error { return nil }
	tests := []struct {
		name string
		h    acemq.Handler[Event]
		want string
	}{
		{"nil saga", saga.Handle[Checkout](nil, byCorrelationID[Event], step), "saga: Handle was given a nil *Saga"},
		{"nil correlate", saga.Handle(f.saga, nil, step), "was given a nil correlate function"},
		{"nil step", saga.Handle[Checkout, Event](f.saga, byCorrelationID[Event], nil), "was given a nil Step"},
		{"nil option", saga.Handle(f.saga, byCorrelationID[Event], step, nil), "was given a nil HandleOption"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ack := tt.h(t.Context(), message("m-1", "o-1", Event{}))
			assert.Equal(t, acemq.AckRetry, ack.Kind())
			assert.ErrorContains(t, ack.Err(), tt.want)
		})
	}
	ack := saga.Handle(f.saga, byCorrelationID[Event], step)(t.Context(), &acemq.Message[Event]{})
	assert.Equal(t, acemq.AckReject, ack.Kind())
	assert.ErrorContains(t, ack.Err(), "the message has no envelope or no ID")
}

// CheckoutV2 is Checkout after a change no old row decodes into.
type CheckoutV2 struct {
	Status int `json:"status"`
}

func TestAStateThatDoesNotDecodeIsParked(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		ctx := t.Context()
		f := newFixture[Checkout](t, db, d)
		old := saga.Handle(f.saga, byCorrelationID[Event], func(_ context.Context, in *saga.Instance[Checkout], _ *acemq.Message[Event]) error {
			in.State.Status = "awaiting payment"
			return nil
		}, saga.Starts())
		require.Equal(t, acemq.AckDone, old(ctx, message("m-1", "o-1", Event{})).Kind())

		v2, err := saga.New[CheckoutV2](f.ob, f.saga.Name(), saga.WithInbox(f.inbox))
		require.NoError(t, err)
		defer v2.Close()
		ran := false
		h := saga.Handle(v2, byCorrelationID[Event], func(context.Context, *saga.Instance[CheckoutV2], *acemq.Message[Event]) error {
			ran = true
			return nil
		})
		ack := h(ctx, message("m-2", "o-1", Event{}))
		require.Equal(t, acemq.AckPark, ack.Kind())
		assert.ErrorContains(t, ack.Err(), fmt.Sprintf(`the state of saga %q with correlation ID "o-1" does not decode into saga_test.CheckoutV2: json:`, f.saga.Name()))
		assert.False(t, ran)
		_, err = v2.Get(ctx, "o-1")
		assert.ErrorContains(t, err, "does not decode into saga_test.CheckoutV2")
		snap, err := f.saga.Get(ctx, "o-1")
		require.NoError(t, err)
		assert.Equal(t, int64(1), snap.Version, "nothing changed")
		// The parked message was not claimed: once the state is fixed, its
		// replay runs.
		require.Equal(t, acemq.AckDone, saga.Handle(f.saga, byCorrelationID[Event], func(context.Context, *saga.Instance[Checkout], *acemq.Message[Event]) error {
			return nil
		})(ctx, message("m-2", "o-1", Event{})).Kind())
	})
}

func TestAMessageClaimedElsewhereIsRetried(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
		ctx := t.Context()
		f := newFixture[Checkout](t, db, d)
		// Someone holds the message's key with a lease (a hand-made
		// WithIdempotency over the same inbox, say).
		key := "saga:" + f.saga.Name() + ":m-1"
		got, err := f.inbox.Claim(ctx, key, time.Minute)
		require.NoError(t, err)
		require.Equal(t, patterns.Claimed, got)
		ran := false
		h := saga.Handle(f.saga, byCorrelationID[Event], func(context.Context, *saga.Instance[Checkout], *acemq.Message[Event]) error {
			ran = true
			return nil
		}, saga.Starts())
		ack := h(ctx, message("m-1", "o-1", Event{}))
		require.Equal(t, acemq.AckRetry, ack.Kind())
		assert.ErrorContains(t, ack.Err(), fmt.Sprintf("the inbox key %q is held by a claim in progress", key))
		assert.False(t, ran)
		require.NoError(t, f.inbox.Release(ctx, key))
		require.Equal(t, acemq.AckDone, h(ctx, message("m-1", "o-1", Event{})).Kind())
		assert.True(t, ran)
	})
}

package saga_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
	"github.com/stretchr/testify/require"
)

// BenchmarkStep compares a saga step with the transaction a hand-written
// handler would run for the same work, one delivery at a time: "plain"
// inserts a row and an outbox message and commits; "new" is a saga step
// that starts an instance and sends the same message (inbox claim, load,
// step, insert, commit); "update" is a step on an existing instance (the
// versioned update instead of the insert). Read the ratios, not the times:
//
//	go test -run '^$' -bench Step ./saga/
func BenchmarkStep(b *testing.B) {
	for _, tc := range databases {
		b.Run(tc.name, func(b *testing.B) {
			db := tc.open(b)
			f := newFixture[Checkout](b, db, tc.dialect)
			mq := connect(b, acemqtest.Memory(b))
			pub := outbox.NewPublisher[Notice](f.ob, mq, "", "notices")
			ctx := context.Background()
			seq := 0 // IDs stay unique when -count runs a sub-benchmark again

			plain := unique(b, "plain")
			_, err := db.ExecContext(ctx, "CREATE TABLE "+plain+" (id TEXT PRIMARY KEY, state TEXT NOT NULL)")
			require.NoError(b, err)
			b.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+plain) })
			insert := "INSERT INTO " + plain + " (id, state) VALUES (?, ?)"
			if tc.dialect == outbox.Postgres {
				insert = "INSERT INTO " + plain + " (id, state) VALUES ($1, $2)"
			}
			b.Run("plain", func(b *testing.B) {
				for b.Loop() {
					seq++
					i := seq
					tx, err := db.BeginTx(ctx, nil)
					require.NoError(b, err)
					id := fmt.Sprint("p-", i)
					_, err = tx.ExecContext(ctx, insert, id, `{"status":"placed"}`)
					require.NoError(b, err)
					require.NoError(b, pub.Send(ctx, tx, Notice{OrderID: id, Kind: "placed"}))
					require.NoError(b, tx.Commit())
				}
			})

			step := func(ctx context.Context, in *saga.Instance[Checkout], m *acemq.Message[Event]) error {
				in.State.Status = m.Payload.Kind
				return pub.Send(ctx, in.Tx, Notice{OrderID: in.ID, Kind: m.Payload.Kind})
			}
			h := saga.Handle(f.saga, byCorrelationID[Event], step, saga.Starts())
			b.Run("new", func(b *testing.B) {
				for b.Loop() {
					seq++
					i := seq
					if ack := h(ctx, message(fmt.Sprint("n-", i), fmt.Sprint("s-", i), Event{Kind: "placed"})); ack.Kind() != acemq.AckDone {
						b.Fatal(ack, ack.Err())
					}
				}
			})
			require.Equal(b, acemq.AckDone, h(ctx, message("u-0", "updated", Event{Kind: "placed"})).Kind())
			b.Run("update", func(b *testing.B) {
				for b.Loop() {
					seq++
					i := seq
					if ack := h(ctx, message(fmt.Sprint("u-", i), "updated", Event{Kind: "paid"})); ack.Kind() != acemq.AckDone {
						b.Fatal(ack, ack.Err())
					}
				}
			})
		})
	}
}

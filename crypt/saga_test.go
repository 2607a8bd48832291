package crypt_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/crypt"
	"github.com/acemq/acemq/outbox"
	"github.com/acemq/acemq/saga"
	"github.com/stretchr/testify/require"
)

// checkout is a saga state holding what must not be stored in the clear.
type checkout struct {
	Card   string `json:"card"`
	Status string `json:"status"`
}

// TestSagaStateSealed: with WithStateCipher (a per-subject cipher here),
// the state column holds the sealed state and the key ID, Get opens it,
// and once a subject's key is shredded the next message to its instance
// is parked while another subject's instance goes on.
func TestSagaStateSealed(t *testing.T) {
	for _, d := range []outbox.Dialect{outbox.Postgres, outbox.SQLite} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := t.Context()
			db := openDB(t, d)
			var b [4]byte
			_, _ = rand.Read(b[:])
			suffix := hex.EncodeToString(b[:])
			o, err := outbox.New(db, d, outbox.Table("crypt_saga_outbox_"+suffix))
			require.NoError(t, err)
			in, err := outbox.NewInbox(db, d, outbox.Table("crypt_saga_inbox_"+suffix))
			require.NoError(t, err)
			keys := &crypt.MemorySubjectKeys{}
			cipher, err := crypt.PerSubject(keys, tenantOf)
			require.NoError(t, err)
			s, err := saga.New[checkout](o, "crypt_"+suffix, saga.WithStateCipher(cipher), saga.WithInbox(in), saga.WithLogger(quiet))
			require.NoError(t, err)
			require.NoError(t, o.Migrate(ctx))
			require.NoError(t, s.Migrate(ctx))
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				require.NoError(t, s.Drop(ctx))
				require.NoError(t, in.Drop(ctx))
				require.NoError(t, o.Drop(ctx))
				require.NoError(t, s.Close())
				require.NoError(t, o.Close())
			})

			url := brokers[0].url(t)
			got, onSettled := newSettlements()
			c := connect(t, url, acemq.WithBodyCipher(cipher), onSettled)
			q := consumerQueue(t, url, "crypt-saga")
			cons, err := acemq.NewConsumer(c, q, saga.Handle(s,
				func(m *acemq.Message[order]) string { return m.Payload.Tenant + "-order" },
				func(_ context.Context, in *saga.Instance[checkout], m *acemq.Message[order]) error {
					if in.New() {
						in.State.Card = m.Payload.Card
					}
					in.State.Status = "step " + string(rune('0'+m.Payload.N))
					return nil
				}, saga.Starts()))
			require.NoError(t, err)
			run(t, cons)
			pub := acemq.NewPublisher[order](c, "", q)
			for _, tn := range []string{"t-alpha", "t-bravo"} {
				require.NoError(t, pub.Send(ctx, order{Tenant: tn, Card: marker, N: 1}, acemq.Header("tenant", tn)))
				require.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
			}

			var state string
			require.NoError(t, db.QueryRowContext(ctx, "SELECT state FROM "+saga.TablePrefix+s.Name()+" WHERE id = 't-bravo-order'").Scan(&state))
			require.NotContains(t, state, marker, "plaintext in the saga's table")
			require.Contains(t, state, `"acemq_sealed"`)
			require.Contains(t, state, `"t-bravo/`)
			snap, err := s.Get(ctx, "t-bravo-order")
			require.NoError(t, err)
			require.Equal(t, marker, snap.State.Card)

			keys.Delete("t-bravo")
			_, err = s.Get(ctx, "t-bravo-order")
			require.ErrorIs(t, err, crypt.ErrUnknownKey)
			// A new message for the shredded tenant's instance: its own key
			// is new, but the stored state was sealed under the old one.
			require.NoError(t, pub.Send(ctx, order{Tenant: "t-bravo", N: 2}, acemq.Header("tenant", "t-bravo")))
			st := got.next(t)
			require.Equal(t, acemq.OutcomeParked, st.Outcome)
			require.Contains(t, st.Reason, `the state does not open: crypt: unknown key`)
			require.NoError(t, pub.Send(ctx, order{Tenant: "t-alpha", N: 2}, acemq.Header("tenant", "t-alpha")))
			require.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
			snap, err = s.Get(ctx, "t-alpha-order")
			require.NoError(t, err)
			require.Equal(t, "step 2", snap.State.Status)
		})
	}
}

func TestWithStateCipherNil(t *testing.T) {
	o, err := outbox.New(openDB(t, outbox.SQLite), outbox.SQLite)
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	_, err = saga.New[checkout](o, "nilcipher", saga.WithStateCipher(nil))
	require.ErrorContains(t, err, "WithStateCipher was given nil")
}

package crypt_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// openDB opens the test's database: PostgreSQL (skipped when absent unless
// ACEMQ_REQUIRE_BROKER is set) or SQLite in a temporary file.
func openDB(t *testing.T, d outbox.Dialect) *sql.DB {
	t.Helper()
	var db *sql.DB
	var err error
	if d == outbox.Postgres {
		db, err = sql.Open("pgx", acemqtest.Postgres(t))
	} else {
		db, err = sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "o.db")+"?_pragma=busy_timeout(5000)")
		if err == nil {
			db.SetMaxOpenConns(1)
		}
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(t.Context()))
	return db
}

// TestOutboxRowHoldsCiphertext: the outbox row an outbox.Publisher writes
// in the caller's transaction holds the sealed body (Prepare seals before
// the row is written) and the key ID among its reserved headers; the relay
// publishes it as it is, and the consumer opens it.
func TestOutboxRowHoldsCiphertext(t *testing.T) {
	for _, d := range []outbox.Dialect{outbox.Postgres, outbox.SQLite} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := t.Context()
			db := openDB(t, d)
			var b [5]byte
			_, _ = rand.Read(b[:])
			o, err := outbox.New(db, d, outbox.Table("crypt_outbox_"+hex.EncodeToString(b[:])))
			require.NoError(t, err)
			t.Cleanup(func() { _ = o.Close() })
			require.NoError(t, o.Migrate(ctx))
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = o.Drop(ctx)
			})
			url := brokers[0].url(t)
			k, _ := newKeys(t)
			got, onSettled := newSettlements()
			c := connect(t, url, acemq.WithBodyCipher(k), onSettled)
			q := consumerQueue(t, url, "crypt-outbox")
			seen := make(chan string, 1)
			cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[order]) acemq.Ack {
				seen <- m.Payload.Card
				return acemq.Done()
			})
			require.NoError(t, err)

			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, outbox.NewPublisher[order](o, c, "", q).Send(ctx, tx, order{Card: marker}))
			require.NoError(t, tx.Commit())

			var headers string
			var body []byte
			require.NoError(t, db.QueryRowContext(ctx, "SELECT headers, body FROM "+o.TableName()).Scan(&headers, &body))
			require.NotContains(t, string(body), marker, "plaintext in the outbox row")
			require.NotContains(t, headers, marker)
			require.Contains(t, headers, acemq.CipherHeader)

			relay := outbox.NewRelay(o, c)
			run(t, relay)
			run(t, cons)
			require.Equal(t, acemq.OutcomeAcked, got.next(t).Outcome)
			require.Equal(t, marker, <-seen)
		})
	}
}

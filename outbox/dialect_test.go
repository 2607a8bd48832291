package outbox_test

import (
	"testing"
	"time"

	"github.com/acemq/acemq/outbox"
)

func TestDialectRebindAndTimeArg(t *testing.T) {
	const q = "UPDATE t SET a = ?, b = ? WHERE id = ? AND fence <= ?"
	if got, want := outbox.Postgres.Rebind(q), "UPDATE t SET a = $1, b = $2 WHERE id = $3 AND fence <= $4"; got != want {
		t.Errorf("Postgres.Rebind = %q, want %q", got, want)
	}
	if got := outbox.SQLite.Rebind(q); got != q {
		t.Errorf("SQLite.Rebind = %q, want it unchanged", got)
	}
	at := time.Date(2026, 12, 2, 21, 0, 0, 1000, time.FixedZone("x", 3600))
	if got, ok := outbox.Postgres.TimeArg(at).(time.Time); !ok || !got.Equal(at) || got.Location() != time.UTC {
		t.Errorf("Postgres.TimeArg = %v, want %v in UTC", got, at)
	}
	if got := outbox.SQLite.TimeArg(at); got != at.UnixMicro() {
		t.Errorf("SQLite.TimeArg = %v, want %d", got, at.UnixMicro())
	}
}

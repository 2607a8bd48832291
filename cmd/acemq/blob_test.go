package main

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/blob"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestBlobSweep(t *testing.T) {
	dir := t.TempDir()
	s, err := blob.Dir(dir)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = s.Put(ctx, "old", strings.NewReader("x"), time.Now().Add(-time.Minute))
	require.NoError(t, err)
	_, err = s.Put(ctx, "live", strings.NewReader("y"), time.Now().Add(time.Hour))
	require.NoError(t, err)
	r := runCLI(t, "blob", "sweep", "-store", "dir:"+dir)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "swept 1 expired object\n", r.stdout)
	rc, err := s.Open(ctx, "live", 0)
	require.NoError(t, err)
	require.NoError(t, rc.Close())

	for _, tc := range []struct{ args, want string }{
		{"blob", "the subcommand is sweep"},
		{"blob sweep", "name the store with -store"},
		{"blob sweep -store ftp://x", "-store must be dir:PATH"},
	} {
		r := runCLI(t, strings.Fields(tc.args)...)
		require.Equal(t, 2, r.code, tc.args)
		require.Contains(t, r.stderr, tc.want)
	}
}

// TestPeekAndReplayShowObjects: peek shows a message's Ref; replay -store
// says which messages name an object that is gone, before moving them.
func TestPeekAndReplayShowObjects(t *testing.T) {
	url := acemqtest.Memory(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := acemq.Connect(ctx, url, acemq.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer c.Close()
	q := acemqtest.QueueName(t, "reports")
	require.NoError(t, c.Declare(ctx, acemq.Queue{Name: q}, acemq.Queue{Name: q + ".back"}))
	dir := t.TempDir()
	s, err := blob.Dir(dir)
	require.NoError(t, err)
	p := blob.NewPublisher[string](c, s, "", q)
	kept, err := p.Send(ctx, "kept", bytes.NewReader(make([]byte, 1000)))
	require.NoError(t, err)
	lost, err := p.Send(ctx, "lost", bytes.NewReader(make([]byte, 2000)))
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, lost.ID))

	r := runCLI(t, "-url", url, "peek", q)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "object "+kept.ID+", 1000 bytes, sha256 "+kept.SHA256+", expires "+kept.Expires.UTC().Format(time.RFC3339))

	r = runCLI(t, "-url", url, "replay", q, q+".back", "-store", "dir:"+dir, "-progress", "0")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "names object "+lost.ID+", 2000 bytes")
	require.NotContains(t, r.stdout, kept.ID)
	require.Contains(t, r.stdout, "1 message whose object is gone")
	require.Contains(t, r.stdout, "moved 2, skipped 0, failed 0")
}

// pgSchema makes a PostgreSQL schema of the test's own, dropped with
// everything in it when the test ends, and returns an admin handle and a
// URL whose search_path is that schema (so the schema starts empty: no
// acemq_blob table in it, whatever the database has elsewhere).
func pgSchema(t *testing.T) (*sql.DB, string) {
	t.Helper()
	raw := acemqtest.Postgres(t)
	schema := strings.ToLower(strings.NewReplacer("/", "_", "-", "_", ".", "_").Replace(acemqtest.QueueName(t, "sweep")))
	admin, err := sql.Open("pgx", raw)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	_, err = admin.ExecContext(t.Context(), `CREATE SCHEMA "`+schema+`"`)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP SCHEMA "`+schema+`" CASCADE`); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(raw)
	require.NoError(t, err)
	qs := u.Query()
	qs.Set("search_path", schema)
	u.RawQuery = qs.Encode()
	return admin, u.String()
}

// TestBlobSweepPostgresTable: on a database without the default table,
// blob sweep says which table it looked for and to pass -table, prints no
// "swept" line and fails; with -table naming the store's table it sweeps.
func TestBlobSweepPostgresTable(t *testing.T) {
	t.Parallel()
	_, spec := pgSchema(t)
	r := runCLI(t, "blob", "sweep", "-store", spec)
	require.Equal(t, exitFailure, r.code, r.stdout+r.stderr)
	require.Empty(t, r.stdout, "a failed sweep printed a result")
	for _, want := range []string{"table " + blob.DefaultSQLTable + " ", "does not exist", "pass -table NAME"} {
		require.Contains(t, r.stderr, want)
	}

	// The store's own table, in the schema, with one expired object and
	// one live one.
	db, err := sql.Open("pgx", spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	table := "blobs_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	s, err := blob.SQLDB(db, blob.Postgres, blob.SQLTable(table))
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, s.Migrate(ctx))
	_, err = s.Put(ctx, "old", strings.NewReader("x"), time.Now().Add(-time.Minute))
	require.NoError(t, err)
	_, err = s.Put(ctx, "live", strings.NewReader("y"), time.Now().Add(time.Hour))
	require.NoError(t, err)

	r = runCLI(t, "blob", "sweep", "-store", spec, "-table", "acemq_blob_"+table)
	require.Equal(t, exitFailure, r.code, r.stdout+r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "table acemq_blob_"+table+" ")

	r = runCLI(t, "blob", "sweep", "-store", spec, "-table", table)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "swept 1 expired object\n", r.stdout)
	_, err = s.Open(ctx, "old", 0)
	require.ErrorIs(t, err, blob.ErrNotFound)
	rc, err := s.Open(ctx, "live", 0)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
}

package blob_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/blob"
	"github.com/stretchr/testify/require"
)

// TestDirSweepSkipsBadSidecars: a Dir store's Sweep skips a sidecar that
// does not decode, one whose name is no object's and one naming another
// object, reports each in its error, and deletes the expired objects
// listed after them. The ID is the file name's: a fake sidecar naming an
// object that never expires does not get it deleted, and an Open of the
// fake's name finds it corrupt.
func TestDirSweepSkipsBadSidecars(t *testing.T) {
	dir := t.TempDir()
	s, err := blob.Dir(dir)
	require.NoError(t, err)
	ctx := t.Context()
	past := time.Now().Add(-time.Hour)
	for _, id := range []string{"a-expired", "m-corrupt", "z-expired"} {
		_, err := s.Put(ctx, id, strings.NewReader(id), past)
		require.NoError(t, err)
	}
	_, err = s.Put(ctx, "victim", strings.NewReader("keep me"), time.Time{})
	require.NoError(t, err)
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	write("m-corrupt.meta", "{not json")
	write("f-fake.meta", `{"id":"victim","size":7,"sha256":"00","expires":"2000-01-01T00:00:00Z"}`)
	write("NotOurs.meta", `{"id":"NotOurs","expires":"2000-01-01T00:00:00Z"}`)

	n, err := blob.Sweep(ctx, s, time.Now())
	require.Equal(t, 2, n, "the two expired objects, around the bad sidecars")
	require.ErrorIs(t, err, blob.ErrCorrupt)
	for _, want := range []string{"m-corrupt.meta", `f-fake.meta names the id "victim", not its own "f-fake"`, "NotOurs.meta is not a sidecar of this store"} {
		require.ErrorContains(t, err, want)
	}
	require.True(t, strings.HasPrefix(err.Error(), "blob: sweep: "), err.Error())
	for _, id := range []string{"a-expired", "z-expired"} {
		_, err := s.Open(ctx, id, 0)
		require.ErrorIs(t, err, blob.ErrNotFound, id)
		_, err = os.Stat(filepath.Join(dir, id))
		require.ErrorIs(t, err, os.ErrNotExist, "%s's data is deleted", id)
	}
	rc, err := s.Open(ctx, "victim", 0)
	require.NoError(t, err, "the fake sidecar's victim is still there")
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Equal(t, "keep me", string(b))
	_, err = s.Open(ctx, "f-fake", 0)
	require.ErrorIs(t, err, blob.ErrCorrupt)
	_, err = os.Stat(filepath.Join(dir, "m-corrupt"))
	require.NoError(t, err, "a corrupt object is left for someone to look at")

	// A second sweep reports the same files and deletes nothing: fakes are
	// never counted as swept.
	n, err = blob.Sweep(ctx, s, time.Now())
	require.Equal(t, 0, n)
	require.ErrorContains(t, err, "f-fake.meta")

	// A cancelled ctx still ends it.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = blob.Sweep(cctx, s, time.Now())
	require.ErrorIs(t, err, context.Canceled)

	var listed []string
	for id, err := range s.Expired(ctx, time.Now()) {
		if err == nil {
			listed = append(listed, id)
		}
	}
	require.Empty(t, listed, "nothing expired is left, and the fake's victim is never listed")
}

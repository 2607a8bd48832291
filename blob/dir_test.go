package blob_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/blob"
)

func newDirStore(t *testing.T) (blob.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := blob.Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// The files on disk: the data as put under the escaped ID, and a sidecar
// holding the expiry, which is all Expired reads (it lists an object whose
// data file is gone).
func TestDirLayout(t *testing.T) {
	s, dir := newDirStore(t)
	ctx := t.Context()
	exp := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := s.Put(ctx, "Orders/42.pdf", strings.NewReader("%PDF"), exp); err != nil {
		t.Fatal(err)
	}
	const name = "%4Frders%2F42%2Epdf"
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil || string(data) != "%PDF" {
		t.Fatalf("data file %s: %q, %v", name, data, err)
	}
	var meta struct {
		ID      string    `json:"id"`
		Size    int64     `json:"size"`
		Expires time.Time `json:"expires"`
	}
	b, err := os.ReadFile(filepath.Join(dir, name+".meta"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &meta); err != nil || meta.ID != "Orders/42.pdf" || meta.Size != 4 || !meta.Expires.Equal(exp) {
		t.Fatalf("sidecar %s = %s (%v)", name+".meta", b, err)
	}
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	if got := expiredIDs(t, s, time.Now()); !slices.Equal(got, []string{"Orders/42.pdf"}) {
		t.Fatalf("Expired without the data file = %q", got)
	}
	if err := s.Delete(ctx, "Orders/42.pdf"); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("%d files left after Delete", len(entries))
	}
}

// Dir removes the temporary files of a Put that died more than an hour
// ago, and leaves a younger one (a Put that may still be running).
func TestDirRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	old, young := filepath.Join(dir, ".tmp-old"), filepath.Join(dir, ".tmp-young")
	for _, p := range []string{old, young} {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	if _, err := blob.Dir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the stale temporary file is still there: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("the young temporary file was removed: %v", err)
	}
}

func TestDirBadInput(t *testing.T) {
	if _, err := blob.Dir(""); err == nil {
		t.Error("Dir(\"\") succeeded")
	}
	if _, err := blob.Dir(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Dir of a missing directory succeeded")
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := blob.Dir(f); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Dir of a file: %v", err)
	}
	s, _ := newDirStore(t)
	long := strings.Repeat("A", 100) // 300 bytes escaped
	if _, err := s.Put(t.Context(), long, strings.NewReader("x"), time.Time{}); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("Put of a 100-byte upper-case ID: %v; want too long", err)
	}
}

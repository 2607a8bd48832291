package blob_test

import (
	"context"
	"errors"
	"io"
	"iter"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/blob"
)

// Sweep deletes exactly what Expired lists at now: an object expiring a
// moment after now, one without expiry and one a dead-letter message still
// names (its expiry set past the .dlq's inspection window) all stay.
func TestSweepDeletesOnlyExpired(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func(t *testing.T) blob.Store
	}{
		{"memory", func(*testing.T) blob.Store { return blob.Memory() }},
		{"dir", func(t *testing.T) blob.Store {
			s, err := blob.Dir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			s := tc.new(t)
			now := time.Now()
			objects := map[string]time.Time{
				"gone-1":     now.Add(-time.Hour),
				"gone-2":     now.Add(-time.Nanosecond),
				"at-now":     now,
				"just-after": now.Add(time.Minute),
				"dlq-held":   now.Add(7 * 24 * time.Hour),
				"forever":    {},
			}
			for id, exp := range objects {
				if _, err := s.Put(ctx, id, strings.NewReader(id), exp); err != nil {
					t.Fatal(err)
				}
			}
			n, err := blob.Sweep(ctx, s, now)
			if err != nil || n != 2 {
				t.Fatalf("Sweep = %d, %v; want 2, nil", n, err)
			}
			// What is left, seen through Expired (Open would judge by the
			// clock, which has moved on past at-now).
			want := []string{"at-now", "dlq-held", "just-after"}
			if got := expiredIDs(t, s, now.Add(8*24*time.Hour)); !slices.Equal(got, want) {
				t.Errorf("Expired 8 days later lists %q; want %q (Sweep must not have touched them)", got, want)
			}
			for _, id := range []string{"dlq-held", "forever"} {
				if _, err := s.Open(ctx, id, 0); err != nil {
					t.Errorf("after Sweep, Open(%q): %v", id, err)
				}
			}
			if n, err := blob.Sweep(ctx, s, now); err != nil || n != 0 {
				t.Fatalf("a second Sweep = %d, %v; want 0, nil", n, err)
			}
		})
	}
}

func expiredIDs(t *testing.T, s blob.Store, before time.Time) []string {
	t.Helper()
	var ids []string
	for id, err := range s.Expired(t.Context(), before) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// faultyStore fails the Delete of one ID and the listing after some IDs.
type faultyStore struct {
	blob.Store
	failDelete string
	listed     []string
	listErr    error
	deleted    []string
}

func (f *faultyStore) Delete(ctx context.Context, id string) error {
	if id == f.failDelete {
		return errors.New("disk on fire")
	}
	f.deleted = append(f.deleted, id)
	return nil
}

func (f *faultyStore) Expired(ctx context.Context, before time.Time) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for _, id := range f.listed {
			if !yield(id, nil) {
				return
			}
		}
		if f.listErr != nil {
			yield("", f.listErr)
		}
	}
}

func (f *faultyStore) Open(context.Context, string, int64) (io.ReadCloser, error) {
	return nil, blob.ErrNotFound
}

// A failed Delete is reported and skipped; a listing error ends the sweep
// and is reported; a cancelled ctx stops it.
func TestSweepErrors(t *testing.T) {
	listErr := errors.New("listing broke")
	f := &faultyStore{failDelete: "b", listed: []string{"a", "b", "c"}, listErr: listErr}
	n, err := blob.Sweep(t.Context(), f, time.Now())
	if n != 2 || !slices.Equal(f.deleted, []string{"a", "c"}) {
		t.Fatalf("Sweep deleted %d (%q); want a and c", n, f.deleted)
	}
	if !errors.Is(err, listErr) || !strings.Contains(err.Error(), `deleting "b"`) || !strings.HasPrefix(err.Error(), "blob: ") {
		t.Fatalf("Sweep error %v; want both the listing's error and b's Delete named", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	f = &faultyStore{listed: []string{"a"}}
	if n, err := blob.Sweep(ctx, f, time.Now()); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Sweep with a cancelled ctx = %d, %v; want 0, context.Canceled", n, err)
	}
	if _, err := blob.Sweep(t.Context(), nil, time.Now()); err == nil {
		t.Fatal("Sweep of a nil Store succeeded")
	}
}

package errkind_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/acemq/acemq/internal/errkind"
)

// TestSentinelsOfAKindMatchEachOther: two packages' sentinels of one kind
// are errors.Is each other, bare and wrapped, both ways; sentinels of other
// kinds, and plain errors with the same text, are not.
func TestSentinelsOfAKindMatchEachOther(t *testing.T) {
	t.Parallel()
	kinds := []*errkind.Kind{errkind.Closed, errkind.Unroutable, errkind.Nacked, errkind.TopologyConflict, errkind.NotFound}
	for i, k := range kinds {
		lower, upper := k.Sentinel("lower: it"), k.Sentinel("upper: it")
		if lower.Error() != "lower: it" || upper.Error() != "upper: it" {
			t.Fatalf("texts: %q, %q", lower, upper)
		}
		wrapped := fmt.Errorf("lower: doing a thing: %w", lower)
		for _, c := range []struct {
			err, target error
		}{{lower, upper}, {upper, lower}, {wrapped, upper}, {fmt.Errorf("upper: %w", upper), lower}} {
			if !errors.Is(c.err, c.target) {
				t.Errorf("kind %d: errors.Is(%q, %q) is false", i, c.err, c.target)
			}
		}
		if errors.Is(lower, errors.New("upper: it")) || errors.Is(errors.New("upper: it"), lower) {
			t.Errorf("kind %d: a plain error of the same text matched", i)
		}
		for j, other := range kinds {
			if j != i && (errors.Is(wrapped, other.Sentinel("upper: it")) || errors.Is(other.Sentinel("x"), lower)) {
				t.Errorf("kind %d matched kind %d", i, j)
			}
		}
	}
}

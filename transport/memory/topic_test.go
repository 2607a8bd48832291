package memory

import (
	"strings"
	"testing"
)

func TestTopicMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		pattern, key string
		want         bool
	}{
		{"exact", "a.b.c", "a.b.c", true},
		{"exact differs", "a.b.c", "a.b.d", false},
		{"exact shorter key", "a.b.c", "a.b", false},
		{"exact longer key", "a.b", "a.b.c", false},
		{"star one word", "a.*", "a.b", true},
		{"star needs a word", "a.*", "a", false},
		{"star only one word", "a.*", "a.b.c", false},
		{"star in the middle", "a.*.c", "a.b.c", true},
		{"star matches an empty word", "a.*", "a.", true},
		{"star alone, empty key", "*", "", false},
		{"star alone, one word", "*", "abc", true},
		{"hash alone matches everything", "#", "a.b.c", true},
		{"hash alone matches the empty key", "#", "", true},
		{"hash matches zero words", "a.#", "a", true},
		{"hash matches one word", "a.#", "a.b", true},
		{"hash matches many words", "a.#", "a.b.c.d", true},
		{"hash prefix", "#.c", "c", true},
		{"hash prefix many", "#.c", "a.b.c", true},
		{"hash prefix mismatch", "#.c", "a.b.c.d", false},
		{"hash in the middle, zero words", "a.#.c", "a.c", true},
		{"hash in the middle, several", "a.#.c", "a.x.y.c", true},
		{"hash in the middle, mismatch", "a.#.c", "a.x.y.d", false},
		{"two hashes", "#.b.#", "b", true},
		{"two hashes around", "#.b.#", "a.b.c", true},
		{"two hashes missing", "#.b.#", "a.c", false},
		{"hash then star", "#.*", "", false},
		{"hash then star, one", "#.*", "a", true},
		{"star then hash", "*.#", "a.b.c", true},
		{"hash hash", "#.#", "", true},
		{"backtracking", "#.a.b", "a.a.b", true},
		{"backtracking fails", "#.a.b", "a.b.a", false},
		{"star is literal inside a word", "a*", "ab", false},
		{"star literal matches itself", "a*", "a*", true},
		{"hash is literal inside a word", "a#", "a.b", false},
		{"empty pattern, empty key", "", "", true},
		{"empty pattern, word", "", "a", false},
		{"empty word pattern", ".", ".", true},
		{"empty word versus empty key", ".", "", false},
		{"trailing dot", "a.", "a.", true},
		{"trailing dot versus none", "a.", "a", false},
		{"hash before empty word", "#.", "a.", true},
		{"case matters", "A.b", "a.b", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := topicMatch(tc.pattern, tc.key); got != tc.want {
				t.Errorf("topicMatch(%q, %q) = %v; want %v", tc.pattern, tc.key, got, tc.want)
			}
			if got := referenceMatch(tc.pattern, tc.key); got != tc.want {
				t.Errorf("referenceMatch(%q, %q) = %v; want %v (the table is wrong)", tc.pattern, tc.key, got, tc.want)
			}
		})
	}
}

func TestTopicMatchAllocatesNothing(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		topicMatch("orders.#.eu.*", "orders.created.x.eu.de")
	})
	if allocs != 0 {
		t.Errorf("topicMatch allocates %v times per call; want 0", allocs)
	}
}

func FuzzTopicMatch(f *testing.F) {
	for _, seed := range [][2]string{
		{"a.b.c", "a.b.c"}, {"a.*", "a.b"}, {"#", ""}, {"a.#", "a"}, {"#.c", "a.b.c"},
		{"a.#.c", "a.x.y.c"}, {"#.b.#", "a.b.c"}, {"#.*", ""}, {"#.a.b", "a.a.b"},
		{"a*", "a*"}, {"", ""}, {".", "."}, {"a.", "a."}, {"#.#.#", "..."}, {"*.*", "."},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, key string) {
		if got, want := topicMatch(pattern, key), referenceMatch(pattern, key); got != want {
			t.Errorf("topicMatch(%q, %q) = %v; the reference says %v", pattern, key, got, want)
		}
	})
}

// referenceMatch is the obvious recursive matcher over RabbitMQ's word
// lists, slow but plainly right, to check topicMatch against.
func referenceMatch(pattern, key string) bool {
	return matchWords(splitWords(pattern), splitWords(key))
}

// splitWords splits as RabbitMQ does: "" is no words, "a." is "a" and "".
func splitWords(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ".")
}

func matchWords(p, k []string) bool {
	if len(p) == 0 {
		return len(k) == 0
	}
	switch p[0] {
	case "#":
		for i := 0; i <= len(k); i++ {
			if matchWords(p[1:], k[i:]) {
				return true
			}
		}
		return false
	case "*":
		return len(k) > 0 && matchWords(p[1:], k[1:])
	default:
		return len(k) > 0 && p[0] == k[0] && matchWords(p[1:], k[1:])
	}
}

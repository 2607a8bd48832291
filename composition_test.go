package acemq_test

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The composition suite: each capability passes its own tests, and the
// failures come where two of them meet. A pair is two features that meet in
// real services, what must hold where they meet, and a test of it that runs
// once on memory:// and once on RabbitMQ (onBrokers). Pairs are registered
// by the files that test them (composition_*_test.go), each with
// registerPair at package level, so that TestComposition runs them all and
// TestCompositionCoversThePairs fails when a pair the suite promises has no
// test. A pair that makes no sense is registered with the reason in skip:
// it shows in the test's output and in the table.

// pair is one meeting of two features.
type pair struct {
	a, b  string // the features, as in requiredPairs
	holds string // what must hold where they meet
	// run tests it on the broker at url; nil with skip set.
	run  func(t *testing.T, url string)
	skip string // why the pair makes no sense, instead of run
}

func (p pair) name() string { return p.a + "×" + p.b }

var (
	pairsMu sync.Mutex
	pairs   []pair
)

// registerPair adds p to the suite; it returns nothing of use, so that a
// file can register at package level: var _ = registerPair(pair{...}).
func registerPair(p pair) struct{} {
	pairsMu.Lock()
	defer pairsMu.Unlock()
	pairs = append(pairs, p)
	return struct{}{}
}

// requiredPairs are the pairs the suite must cover (issue 37).
var requiredPairs = []string{
	"ordered×release rerun", "ordered×release skip", "ordered×fencing", "ordered×claim check",
	"ordered×blob stream", "ordered×kill switch", "ordered×Delete", "ordered×Close during a release",
	"batch×claim check", "batch×kill switch", "batch×Close",
	"Router×invalid option", "Router×Delete", "Router×Health",
	"saga×ordered release", "saga×fencing",
	"outbox×claim check", "outbox×ordered key",
	"consumer×Health before Run", "consumer×Health after Run returned", "consumer×Health after Close",
	"ordered×Health before Run", "ordered×Health after Run returned", "ordered×Health after Close",
	"batch×Health before Run", "batch×Health after Run returned", "batch×Health after Close",
	"Router×Health before Run", "Router×Health after Run returned", "Router×Health after Close",
}

func registered() []pair {
	pairsMu.Lock()
	defer pairsMu.Unlock()
	ps := slices.Clone(pairs)
	slices.SortFunc(ps, func(x, y pair) int { return cmp.Compare(x.name(), y.name()) })
	return ps
}

func TestComposition(t *testing.T) {
	t.Parallel()
	for _, p := range registered() {
		t.Run(p.name(), func(t *testing.T) {
			t.Parallel()
			if p.skip != "" {
				t.Skip("makes no sense: " + p.skip)
			}
			t.Logf("holds: %s", p.holds)
			onBrokers(t, p.run)
		})
	}
}

func TestCompositionCoversThePairs(t *testing.T) {
	have := make(map[string]int)
	for _, p := range registered() {
		have[p.name()]++
		if p.holds == "" || (p.run == nil) == (p.skip == "") {
			t.Errorf("pair %s: give what holds, and either run or skip", p.name())
		}
	}
	var missing []string
	for _, name := range requiredPairs {
		if have[name] == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the composition suite has no test of: %s", strings.Join(missing, "; "))
	}
	for name, n := range have {
		if n > 1 {
			t.Errorf("pair %s is registered %d times", name, n)
		}
	}
}

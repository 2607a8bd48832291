package ordering

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
)

// noLeases is a transport without leases.
type noLeases struct{ transport.Transport }

func TestNewSpreaderRefuses(t *testing.T) {
	t.Parallel()
	tr := noLeases{memory.New(t.Name())}
	t.Cleanup(func() { _ = tr.Close() })
	for _, tc := range []struct {
		name       string
		t          transport.Transport
		queue      string
		partitions int
		want       []string
	}{
		{name: "not a Leaser", t: tr, queue: "orders", partitions: 12, want: []string{`ordered queue "orders": the transport ordering.noLeases cannot hold leases`, "ordering.noLeases", "transport.Leaser"}},
		{name: "nil transport", t: nil, queue: "orders", partitions: 12, want: []string{`ordered queue "orders": the transport is nil`}},
		{name: "no queue name", t: tr, queue: "", partitions: 12, want: []string{"an ordered queue needs a name"}},
		{name: "no partitions", t: tr, queue: "orders", partitions: 0, want: []string{`ordered queue "orders": 0 partitions (want at least 1)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := tc.t.(transport.Leaser)
			s, err := NewSpreader(Broker{T: tc.t, Leaser: l}, tc.queue, tc.partitions, 0)
			require.Error(t, err)
			assert.Nil(t, s)
			// No prefix: the error reaches the user through engine.run,
			// which adds acemq's.
			assert.False(t, strings.Contains(err.Error(), "acemq:"), err.Error())
			assert.True(t, strings.HasPrefix(err.Error(), tc.want[0]), err.Error())
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestSpreaderPartitionsOfASlot(t *testing.T) {
	t.Parallel()
	s := &Spreader{partitions: 12}
	for _, tc := range []struct {
		name string
		j, n int
		want []int
	}{
		{name: "one instance", j: 0, n: 1, want: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
		{name: "slot 1 of 3", j: 1, n: 3, want: []int{1, 4, 7, 10}},
		{name: "slot 4 of 5", j: 4, n: 5, want: []int{4, 9}},
		{name: "slot beyond the count", j: 3, n: 3, want: []int{}},
		{name: "more instances than partitions", j: 12, n: 13, want: []int{}},
		{name: "no count yet", j: 0, n: 0, want: []int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &slotState{lease: fakeHeld{}, j: tc.j, n: tc.n}
			assert.Equal(t, tc.want, s.compute(st))
		})
	}
	assert.Equal(t, []int{}, s.compute(&slotState{j: 0, n: 1}), "without a lease")
}

// fakeHeld is a lease that is never lost.
type fakeHeld struct{}

func (fakeHeld) Lost() <-chan struct{}             { return nil }
func (fakeHeld) Release(ctx context.Context) error { return nil }

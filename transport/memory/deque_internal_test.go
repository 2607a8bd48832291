package memory

import (
	"slices"
	"testing"
)

// TestDequeInsert inserts at every position of deques whose ring has
// wrapped, on both sides of the middle, and checks the order.
func TestDequeInsert(t *testing.T) {
	for n := range 20 {
		for i := 0; i <= n; i++ {
			var d deque[int]
			for range 10 { // move the head, so that the ring wraps
				d.pushBack(-1)
			}
			for range 10 {
				d.popFront()
			}
			var want []int
			for k := range n {
				d.pushBack(k)
				want = append(want, k)
			}
			d.insert(i, 100)
			want = slices.Insert(want, i, 100)
			var got []int
			for k := range d.len() {
				got = append(got, d.at(k))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("insert at %d of %d: %v, want %v", i, n, got, want)
			}
		}
	}
}

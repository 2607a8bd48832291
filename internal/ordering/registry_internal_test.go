package ordering

import (
	"sync"
	"testing"
)

// TestOpLockKeepsOnlyWhatIsInUse: the per-queue locks of the registries
// of one connection exclude each other per queue, and an entry lives only
// while a read or write holds or waits for it, so a connection that saw
// many queues keeps none of them.
func TestOpLockKeepsOnlyWhatIsInUse(t *testing.T) {
	t.Parallel()
	var ops sync.Map
	var wg sync.WaitGroup
	inside := map[string]int{}
	var mu sync.Mutex // guards inside, which the op locks must keep at 0 or 1
	for i := range 400 {
		q := []string{"a", "b", "c", "d"}[i%4]
		wg.Go(func() {
			l := lockOp(&ops, q)
			mu.Lock()
			inside[q]++
			n := inside[q]
			mu.Unlock()
			if n != 1 {
				t.Errorf("%d holders of %s at once", n, q)
			}
			mu.Lock()
			inside[q]--
			mu.Unlock()
			unlockOp(&ops, q, l)
		})
	}
	wg.Wait()
	ops.Range(func(k, _ any) bool {
		t.Errorf("the lock of %v is still kept", k)
		return true
	})
}

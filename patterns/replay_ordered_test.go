package patterns_test

import (
	"errors"
	"testing"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/patterns"
	"github.com/acemq/acemq/transport"
)

// OrderedTarget tells an ordered consumer's queue (an exchange and
// partitions, no queue of the name) from a plain queue and from nothing.
func TestOrderedTarget(t *testing.T) {
	c := connect(t, acemqtest.Memory(t))
	plain, ordered, missing := "plain", "orders", "nothing"
	if err := c.Declare(ctxT(t), acemq.Queue{Name: plain}, acemq.Queue{Name: plain + ".p0"}, acemq.Queue{Name: ordered + ".p0"}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		ordered bool
		err     error
	}{{plain, false, nil}, {ordered, true, nil}, {missing, false, transport.ErrNotFound}} {
		got, err := patterns.OrderedTarget(ctxT(t), c.Transport(), tt.name)
		if got != tt.ordered || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("OrderedTarget(%q) = %v, %v; want %v, %v", tt.name, got, err, tt.ordered, tt.err)
		}
	}
}

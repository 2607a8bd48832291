package wire

import "testing"

// TestCheckValueDepthMatchesAMQP091: amqp091 reads a container that is a
// header's value at depth 1, and refuses one past MaxDepth, so the 32nd
// nested container is the last a header may hold.
func TestCheckValueDepthMatchesAMQP091(t *testing.T) {
	nested := func(n int) any {
		var v any = "leaf"
		for range n {
			v = map[string]any{"k": v}
		}
		return v
	}
	if err := CheckValue(nested(MaxDepth), 0); err != nil {
		t.Errorf("%d nested tables refused: %v", MaxDepth, err)
	}
	if err := CheckValue(nested(MaxDepth+1), 0); err == nil {
		t.Errorf("%d nested tables accepted; amqp091 cannot read them", MaxDepth+1)
	}
	if got := toField(1 << 40); got != int64(1<<40) {
		t.Errorf("toField(1<<40) = %#v; an int must travel as 64 bits", got)
	}
}

// TestCheckValueDepthAgreesWithTheReader: the deepest header value
// CheckValue accepts is one amqp091's reader reads, and the next is not.
func TestCheckValueDepthAgreesWithTheReader(t *testing.T) {
	for _, n := range []int{MaxDepth - 1, MaxDepth, MaxDepth + 1} {
		var v any = map[string]any{"leaf": "x"}
		for range n - 1 {
			v = map[string]any{"n": v}
		}
		accepted := CheckValue(v, 0) == nil
		_, read := amqp091Reads(t, headerFrame(nested(n))) // header "n" holding n nested tables
		if accepted != read {
			t.Errorf("a header of %d nested tables: CheckValue accepts it %v, amqp091 reads it %v", n, accepted, read)
		}
	}
}

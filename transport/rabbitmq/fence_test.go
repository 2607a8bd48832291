package rabbitmq_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// A counter kept by the broker survives the transport that made it: a
// second connection, and one dialled after the first closed, go on above
// every value the first returned.
func TestFenceAcrossConnections(t *testing.T) {
	url := brokerURL(t)
	name := acemqtest.QueueName(t, "fence")
	acemqtest.DeleteQueuesAfter(t, url, name)
	one := dial(t, url, rabbitmq.Config{})
	var got []uint64
	for range 3 {
		v, err := one.Fence(ctxT(t), name)
		if err != nil {
			t.Fatalf("Fence: %v", err)
		}
		got = append(got, v)
	}
	if err := one.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	two := dial(t, url, rabbitmq.Config{})
	v, err := two.Fence(ctxT(t), name)
	if err != nil {
		t.Fatalf("Fence on a new connection: %v", err)
	}
	got = append(got, v)
	if !slices.IsSorted(got) || slices.Compact(slices.Clone(got))[0] == 0 || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("Fence returned %v; want strictly increasing values from 1", got)
	}
}

// A name held by a plain queue is refused as a conflict, and the queue is
// left as it was.
func TestFenceOnAPlainQueue(t *testing.T) {
	url := brokerURL(t)
	tr := dial(t, url, rabbitmq.Config{})
	q := queue(t, tr, "plain", nil)
	_, err := tr.Fence(ctxT(t), q)
	if !errors.Is(err, transport.ErrTopologyConflict) {
		t.Fatalf("Fence on plain queue %q = %v; want ErrTopologyConflict", q, err)
	}
	if _, err := tr.Inspect(ctxT(t), q); err != nil {
		t.Fatalf("Inspect after the refused Fence: %v", err)
	}
	_ = time.Second
}

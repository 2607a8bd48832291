package memory

import (
	"context"
	"fmt"
	"strings"

	"github.com/acemq/acemq/transport"
)

var _ transport.Fencer = (*Transport)(nil)

// Fence increases the broker's counter name and returns its new value; it
// implements transport.Fencer. The counters live in the Broker, apart from
// its queues, and last as long as it: every client of the broker, including
// one connected after another closed, sees each counter go on from where
// it was, and a call is one step under the broker's lock, so no client can
// end half way through it. A name a queue has fails wrapping
// transport.ErrTopologyConflict, as on RabbitMQ, where the counter is a
// stream queue of that name; unlike there, DeleteQueue leaves a counter as
// it is.
func (t *Transport) Fence(ctx context.Context, name string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if name == "" || strings.HasPrefix(name, "amq.") {
		return 0, fmt.Errorf("memory: fence %q: a counter needs a name outside the amq. prefix", name)
	}
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.closed {
		return 0, closedError(fmt.Sprintf("fence %q", name))
	}
	if _, ok := b.queues[name]; ok {
		return 0, errorf(transport.ErrTopologyConflict, "memory: fence %q: a queue of that name exists", name)
	}
	if b.fences == nil {
		b.fences = make(map[string]uint64)
	}
	b.fences[name]++
	return b.fences[name], nil
}

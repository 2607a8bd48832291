package rabbitmq

import (
	"context"

	"github.com/acemq/acemq/internal/wire"
	"github.com/acemq/acemq/transport"
)

// The table conversions, for the fuzz target in package rabbitmq_test
// (which imports acemq, and so cannot live in this package).
var (
	FromTable = wire.FromTable
	ToTable   = wire.ToTable
)

// ProbeKind declares x over a connection of its own as the first
// declaration of a plugin's exchange kind does, naming plugin when the
// broker lacks the kind: the test feeds it a kind no broker has.
func (t *Transport) ProbeKind(ctx context.Context, x transport.Exchange, plugin string) error {
	return t.probeKind(ctx, x, plugin)
}

package rabbitmq

import (
	"context"
	"math"

	amqp "github.com/rabbitmq/amqp091-go"

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

// PublishBatchPoisoned is PublishBatch with the message at index poison
// carrying a header the broker cannot parse (a NaN float, which RabbitMQ
// 3.10 answers by closing the connection), past the checks that refuse
// one: what a bug in those checks would let through.
func (t *Transport) PublishBatchPoisoned(ctx context.Context, ms []transport.Message, poison int) []error {
	return t.publishBatch(ctx, ms, func(i int, r *pubReq) {
		if i == poison {
			r.msg.Headers = amqp.Table{"unparseable": math.NaN()}
		}
	})
}

package rabbitmq

import "github.com/acemq/acemq/internal/wire"

// The table conversions, for the fuzz target in package rabbitmq_test
// (which imports acemq, and so cannot live in this package).
var (
	FromTable = wire.FromTable
	ToTable   = wire.ToTable
)

package rabbitmq

// The table conversions, for the fuzz target in package rabbitmq_test
// (which imports acemq, and so cannot live in this package).
var (
	FromTable = fromTable
	ToTable   = toTable
)

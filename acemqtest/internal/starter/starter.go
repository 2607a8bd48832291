// Package starter is where package acemqtest/container hands acemqtest its
// way to start, and to remove, a broker or database in Docker. Only a test
// binary that imports acemqtest/container sets these hooks, so only such a
// binary links the Docker client.
package starter

// The hooks package acemqtest/container sets in its init. They are nil
// when it is not linked into the test binary.
var (
	// RabbitMQ starts a RabbitMQ container and returns its AMQP URL.
	RabbitMQ func() (string, error)
	// Postgres starts a PostgreSQL container and returns its URL.
	Postgres func() (string, error)
	// Cleanup removes the containers this test binary started.
	Cleanup func() error
)

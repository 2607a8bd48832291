// Package starter is where package acemqtest/container hands acemqtest its
// way to start a broker or database in Docker, so that only the test
// binaries that import acemqtest/container link the Docker client.
package starter

// RabbitMQ and Postgres start a container and return its URL. They are nil
// unless package acemqtest/container is linked into the test binary.
var RabbitMQ, Postgres func() (string, error)

// Package faulttest holds the RabbitMQ transport's fault tests: they close
// every broker connection, stop and start the broker application, and raise
// a memory alarm, so they disturb every other test using the broker. They
// skip unless asked for: run them alone and serially, after the rest, with
//
//	make test-fault
//
// which sets ACEMQ_FAULT_TESTS=1. They need rabbitmqctl on PATH and are
// skipped without it, unless ACEMQ_REQUIRE_BROKER=1, which makes its
// absence a failure.
package faulttest

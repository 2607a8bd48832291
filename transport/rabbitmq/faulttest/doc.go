// Package faulttest holds the RabbitMQ transport's fault tests: they close
// every broker connection, stop and start the broker application, and raise
// a memory alarm, so they disturb every other test using the broker. Run
// them alone and serially, after the rest:
//
//	go test -race -count=1 -p 1 ./transport/rabbitmq/faulttest
//
// They need rabbitmqctl on PATH and are skipped without it, unless
// ACEMQ_REQUIRE_BROKER=1, which makes its absence a failure.
package faulttest

// Package quorumtest holds the tests that run acemq in a vhost of their
// own whose default queue type is quorum. They add and delete that vhost
// with rabbitmqctl (package brokerctl), which is why they live in the
// tools module rather than beside the transport they prove; they skip
// without rabbitmqctl unless ACEMQ_REQUIRE_BROKER=1.
package quorumtest

//go:build acemqtest_container

package acemq_test

// scripts/test-container.sh builds this package's tests with the tag
// acemqtest_container, so that acemqtest starts a broker in Docker when
// none answers; `make test` leaves it out, and links no Docker client.
import _ "github.com/acemq/acemq/acemqtest/container"

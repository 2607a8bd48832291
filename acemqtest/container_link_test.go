//go:build acemqtest_container

package acemqtest_test

// scripts/test-container.sh builds this package's tests with the tag
// acemqtest_container, so that they start containers when no broker
// answers; `make test` leaves it out, and links no Docker client.
import _ "github.com/acemq/acemq/acemqtest/container"

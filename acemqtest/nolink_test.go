//go:build !acemqtest_container

package acemqtest

import (
	"testing"

	"github.com/acemq/acemq/acemqtest/internal/starter"
)

// Without the build tag that links acemqtest/container into this test
// binary, no container hook is set: the binary links no container code.
func TestNoContainerHookUnlessLinked(t *testing.T) {
	if starter.RabbitMQ != nil || starter.Postgres != nil || starter.Cleanup != nil {
		t.Fatal("a container hook is set in a test binary that does not import acemqtest/container")
	}
}

package ordering

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running: a
// Run's spreader, partitions and workers all end with Serve.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

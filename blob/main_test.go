package blob_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running: a
// Reader's read-ahead must end with its handler.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

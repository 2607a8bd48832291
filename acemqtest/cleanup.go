package acemqtest

import (
	"fmt"
	"os"
	"testing"

	"github.com/acemq/acemq/acemqtest/internal/starter"
)

// Main runs the tests of m, removes the containers acemqtest started for
// them, and exits with the tests' exit code. Call it from TestMain:
//
//	func TestMain(m *testing.M) { acemqtest.Main(m) }
//
// A TestMain that does more (goleak.VerifyTestMain, say) calls Cleanup
// itself once the tests have run.
func Main(m *testing.M) {
	code := m.Run()
	if err := Cleanup(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// Cleanup removes the containers acemqtest started in this test binary
// and forgets the brokers it found, so that a later RabbitMQ or Postgres
// looks again. It is safe to call more than once, and removes nothing
// when no container was started, as in a test binary that does not
// import package acemqtest/container. The error names each container it
// could not remove.
func Cleanup() error {
	var err error
	if starter.Cleanup != nil {
		err = starter.Cleanup()
	}
	rabbit.reset()
	pg.reset()
	if err != nil {
		return fmt.Errorf("acemqtest: %w", err)
	}
	return nil
}

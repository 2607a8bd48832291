package container

import (
	"testing"

	"github.com/acemq/acemq/acemqtest"
)

// The tests of this package remove the containers they started, through
// acemqtest.Main and the Cleanup hook this package registers, as users'
// tests do.
func TestMain(m *testing.M) { acemqtest.Main(m) }

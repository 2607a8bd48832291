package acemqtest

import "testing"

// The tests of this package remove the containers they started, as users' should.
func TestMain(m *testing.M) { Main(m) }

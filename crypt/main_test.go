package crypt_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/acemq/acemq/acemqtest"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"
)

// TestMain checks for leaks, then removes the containers acemqtest started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if err := acemqtest.Cleanup(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = max(code, 1)
		}
		os.Exit(code)
	}))
}

package login_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/acemqtest/internal/login"
)

// login.Postgres against the database acemqtest.Postgres finds: a login and a query
// succeed, a database that does not exist is named in the error.
func TestPGLogin(t *testing.T) {
	raw := acemqtest.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := login.Postgres(ctx, raw); err != nil {
		t.Fatalf("login to %s: %v", raw, err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/acemqtest_no_such_database"
	err = login.Postgres(ctx, u.String())
	if err == nil || !strings.Contains(err.Error(), "acemqtest_no_such_database") || !strings.Contains(err.Error(), "3D000") {
		t.Fatalf("login to a missing database: %v, want PostgreSQL's 3D000 naming it", err)
	}
}

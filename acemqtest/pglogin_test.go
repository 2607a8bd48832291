package acemqtest

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The exchange of RFC 7677, section 3.
func TestSCRAMAgainstRFC7677(t *testing.T) {
	t.Parallel()
	c := &scramClient{password: "pencil", nonce: "rOprNGfwEbeRWgbNEkqO", firstBare: "n=user,r=rOprNGfwEbeRWgbNEkqO"}
	final, err := c.clientFinal("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
	if err != nil {
		t.Fatal(err)
	}
	if want := "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="; final != want {
		t.Fatalf("client-final-message\n got %s\nwant %s", final, want)
	}
	if err := c.verify("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="); err != nil {
		t.Fatal(err)
	}
	if err := c.verify("v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="); err == nil {
		t.Fatal("a wrong server signature was accepted")
	}
	if _, err := c.clientFinal("r=someone-elses-nonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"); err == nil {
		t.Fatal("a server nonce that does not extend the client's was accepted")
	}
}

// pgLogin against the database Postgres finds: a login and a query
// succeed, a database that does not exist is named in the error.
func TestPGLogin(t *testing.T) {
	raw := Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pgLogin(ctx, raw); err != nil {
		t.Fatalf("login to %s: %v", raw, err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/acemqtest_no_such_database"
	err = pgLogin(ctx, u.String())
	if err == nil || !strings.Contains(err.Error(), "acemqtest_no_such_database") || !strings.Contains(err.Error(), "3D000") {
		t.Fatalf("login to a missing database: %v, want PostgreSQL's 3D000 naming it", err)
	}
}

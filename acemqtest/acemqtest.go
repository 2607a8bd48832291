// Package acemqtest helps users' tests, and acemq's own, reach a broker: an
// in-process one for unit tests, or a real RabbitMQ (and PostgreSQL for the
// outbox) found through the environment, on this machine, or in a container
// when the test binary imports package acemqtest/container.
package acemqtest

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
)

// Memory returns a memory:// URL naming a broker of the test's own, so two
// Conns connected to it in one test share it and no other test sees it.
func Memory(t testing.TB) string {
	t.Helper()
	return "memory://" + QueueName(t, "broker")
}

// QueueName returns base with a random suffix, so tests sharing one broker
// never meet in a queue. It does not declare anything.
func QueueName(t testing.TB, base string) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("acemqtest: reading random bytes: %v", err)
	}
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	return base + "." + name + "." + hex.EncodeToString(b[:])
}

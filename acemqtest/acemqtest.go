// Package acemqtest helps users' tests, and acemq's own, reach a broker: an
// in-process one for unit tests, or a real RabbitMQ (and PostgreSQL for the
// outbox) found through the environment, on this machine, or in a
// container.
//
// The container fallback lives in package acemqtest/container, a module
// of its own, so that a test binary that reaches its broker by URL links no
// Docker client and a module requiring acemq carries none in its module
// graph. A test binary that wants it requires that module (go get
// github.com/acemq/acemq/acemqtest/container) and imports the package for
// its effect, in one of its test files:
//
//	import _ "github.com/acemq/acemq/acemqtest/container"
//
// It then starts containers with testcontainers-go, one per image per test
// binary, from RabbitMQImage and PostgresImage or the images
// $ACEMQ_RABBITMQ_IMAGE and $ACEMQ_POSTGRES_IMAGE name. Main or Cleanup,
// called from TestMain, removes them when the tests have run; a watchdog
// process removes them when the test binary ends without calling either,
// however it ends. Offline, set TESTCONTAINERS_RYUK_DISABLED=true. Without
// the import, RabbitMQ and Postgres skip (or fail) with a message naming
// it, and Main and Cleanup have no container to remove. docs/testing.md
// says what is left behind, and when.
//
// DeleteAfter removes what a test declared: everything a Consumer or Router
// lists in its Topology, and the exchanges and queues the test declared
// itself.
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

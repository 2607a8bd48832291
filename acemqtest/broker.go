package acemqtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest/internal/login"
	"github.com/acemq/acemq/acemqtest/internal/starter"
)

// Where brokers are looked for, after the environment.
const (
	// LocalRabbitMQ is the broker RabbitMQ tries when ACEMQ_RABBITMQ_URL is
	// unset: RabbitMQ's out-of-the-box guest account on this machine.
	LocalRabbitMQ = "amqp://guest:guest@127.0.0.1:5672/"
	// LocalPostgres is the database Postgres tries when ACEMQ_POSTGRES_URL
	// is unset.
	LocalPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// probeTimeout bounds each attempt to reach a local broker or database.
const probeTimeout = 2 * time.Second

// finder remembers what a search found, so that it runs once per test
// binary (or once after each Cleanup) and every test reuses the answer.
type finder struct {
	mu     sync.Mutex
	done   bool
	url    string
	reason string // why nothing was found, when url is empty
}

var rabbit, pg finder

// find runs search unless an answer is remembered, and returns the URL,
// or "" and the reason nothing was found.
func (f *finder) find(search func() (url, reason string)) (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.done {
		f.url, f.reason = search()
		f.done = true
	}
	return f.url, f.reason
}

// reset forgets the answer.
func (f *finder) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done, f.url, f.reason = false, "", ""
}

// RabbitMQ returns the URL of a RabbitMQ broker for the test: the value of
// $ACEMQ_RABBITMQ_URL when set, else LocalRabbitMQ when a broker there
// accepts an AMQP login, else, when the test binary imports package
// acemqtest/container and a Docker engine answers, a container of
// RabbitMQImage (or of the image $ACEMQ_RABBITMQ_IMAGE names): one for
// the whole test binary, removed by Cleanup or Main, or by a watchdog
// process when the binary ends. When none is found the test is skipped
// with the reason, or fails when $ACEMQ_REQUIRE_BROKER is 1 (as in CI).
func RabbitMQ(t testing.TB) string {
	t.Helper()
	url, reason := rabbit.find(func() (string, string) {
		return findRabbitMQ(LocalRabbitMQ, starter.RabbitMQ)
	})
	if url == "" {
		missing(t, reason)
	}
	return url
}

// findRabbitMQ looks for a broker in the environment, at local, then in a
// container started with start (nil when acemqtest/container is not
// linked), and returns its URL or why there is none.
func findRabbitMQ(local string, start func() (string, error)) (url, reason string) {
	if u := os.Getenv("ACEMQ_RABBITMQ_URL"); u != "" {
		return u, ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	err := login.AMQP(ctx, local)
	if err == nil {
		return local, ""
	}
	u, cerr := fromContainer(start)
	if cerr != nil {
		return "", fmt.Sprintf("no RabbitMQ: $ACEMQ_RABBITMQ_URL is unset, %s does not answer (%v), and no container: %v\n"+
			"Set $ACEMQ_RABBITMQ_URL or start a local broker",
			acemq.Redact(local), err, cerr)
	}
	return u, ""
}

// Postgres returns the URL of a PostgreSQL database for the test: the
// value of $ACEMQ_POSTGRES_URL when set, else LocalPostgres when a server
// there answers PostgreSQL's SSLRequest, else, when the test binary
// imports package acemqtest/container and a Docker engine answers, a
// container of PostgresImage (or of the image $ACEMQ_POSTGRES_IMAGE
// names), found and removed as RabbitMQ's is. acemqtest speaks enough of
// PostgreSQL's protocol to probe and log in, so it needs no database
// driver. When none is found the test is skipped with the reason, or fails
// when $ACEMQ_REQUIRE_BROKER is 1.
func Postgres(t testing.TB) string {
	t.Helper()
	url, reason := pg.find(func() (string, string) {
		return findPostgres("127.0.0.1:5432", LocalPostgres, starter.Postgres)
	})
	if url == "" {
		missing(t, reason)
	}
	return url
}

// findPostgres looks for a database in the environment, at addr (whose
// URL is local), then in a container started with start (nil when
// acemqtest/container is not linked), and returns its URL or why there is
// none.
func findPostgres(addr, local string, start func() (string, error)) (url, reason string) {
	if u := os.Getenv("ACEMQ_POSTGRES_URL"); u != "" {
		return u, ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	err := probePostgres(ctx, addr)
	if err == nil {
		return local, ""
	}
	u, cerr := fromContainer(start)
	if cerr != nil {
		return "", fmt.Sprintf("no PostgreSQL: $ACEMQ_POSTGRES_URL is unset, %s does not answer (%v), and no container: %v\n"+
			"Set $ACEMQ_POSTGRES_URL or start a local server",
			addr, err, cerr)
	}
	return u, ""
}

// containerImport is the import that links the container fallback.
const containerImport = `import _ "github.com/acemq/acemq/acemqtest/container"`

// fromContainer starts a container with start, the hook package
// acemqtest/container sets when it is linked.
func fromContainer(start func() (string, error)) (string, error) {
	if start == nil {
		return "", errors.New("this test binary does not link the container fallback; " +
			"to start one in Docker, require module github.com/acemq/acemq/acemqtest/container and add to one of its test files: " +
			containerImport + " (see docs/testing.md)")
	}
	return start()
}

// missing skips the test, or fails it when a broker is required.
func missing(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("ACEMQ_REQUIRE_BROKER") == "1" {
		t.Fatalf("acemqtest: %s (ACEMQ_REQUIRE_BROKER=1)", reason)
	}
	t.Skipf("acemqtest: %s", reason)
}

// probePostgres sends PostgreSQL's SSLRequest and expects its one-byte
// answer ('S' or 'N'): enough to know a PostgreSQL server listens.
func probePostgres(ctx context.Context, addr string) error {
	c, err := login.Dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	var req [8]byte
	binary.BigEndian.PutUint32(req[0:4], 8)
	binary.BigEndian.PutUint32(req[4:8], 80877103) // the SSLRequest code
	if _, err := c.Write(req[:]); err != nil {
		return err
	}
	var answer [1]byte
	if _, err := io.ReadFull(c, answer[:]); err != nil {
		return err
	}
	if answer[0] != 'S' && answer[0] != 'N' {
		return fmt.Errorf("the server answered %q, not as PostgreSQL does", answer[0])
	}
	return nil
}

// DeleteQueuesAfter registers a cleanup that deletes, on the broker at
// rawURL, each named queue together with the queues acemq derives from it:
// {queue}.dlq, {queue}.parked and the retry tiers of the default retry
// policy ({queue}.retry.1s, .5s, .30s, .2m0s). Tiers of another policy are
// deleted when named among queues. A memory:// URL needs no cleanup and is
// ignored; a failed deletion is reported with t.Errorf.
func DeleteQueuesAfter(t testing.TB, rawURL string, queues ...string) {
	t.Helper()
	if strings.HasPrefix(rawURL, "memory:") || len(queues) == 0 {
		return
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := deleteQueues(ctx, rawURL, queues); err != nil {
			t.Errorf("acemqtest: deleting test queues on %s: %v", acemq.Redact(rawURL), err)
		}
	})
}

func deleteQueues(ctx context.Context, rawURL string, queues []string) error {
	conn, err := login.DialAMQP(ctx, rawURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	var errs []error
	for _, q := range queues {
		for _, name := range derived(q) {
			if _, err := ch.QueueDelete(name, false, false, false); err != nil {
				var ae *amqp.Error
				if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
					errs = append(errs, fmt.Errorf("queue %q: %w", name, err))
				}
				// The refusal closed the channel: carry on with a new one.
				if ch, err = conn.Channel(); err != nil {
					return errors.Join(append(errs, err)...)
				}
			}
		}
	}
	_ = ch.Close()
	return errors.Join(errs...)
}

// derived names q and the queues a consumer of q declares by default.
func derived(q string) []string {
	names := []string{q, acemq.DeadLetterQueue(q), acemq.ParkingQueue(q)}
	if strings.Contains(q, ".retry.") {
		return names[:1] // a tier named on its own
	}
	for _, d := range acemq.DefaultRetryPolicy().Delays {
		names = append(names, acemq.RetryQueue(q, d))
	}
	return names
}

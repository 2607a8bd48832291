package acemqtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest/internal/starter"
	"github.com/acemq/acemq/internal/urls"
)

// The images package acemqtest/container starts when no broker or
// database answers in the environment or locally.
const (
	RabbitMQImage = "rabbitmq:3.13-alpine"
	PostgresImage = "postgres:16-alpine"
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

// The probes run once per test binary; every test then reuses the answer.
var (
	rabbitOnce   sync.Once
	rabbitURL    string
	rabbitReason string

	pgOnce   sync.Once
	pgURL    string
	pgReason string
)

// RabbitMQ returns the URL of a RabbitMQ broker for the test: the value of
// $ACEMQ_RABBITMQ_URL when set, else LocalRabbitMQ when a broker there
// accepts an AMQP login, else a RabbitMQImage container started through
// testcontainers-go when the test binary links package acemqtest/container
// and a Docker engine answers (one for the whole test binary). When none is found the test is skipped with the reason, or fails
// when $ACEMQ_REQUIRE_BROKER is 1 (as in CI).
func RabbitMQ(t testing.TB) string {
	t.Helper()
	rabbitOnce.Do(func() {
		if u := os.Getenv("ACEMQ_RABBITMQ_URL"); u != "" {
			rabbitURL = u
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		err := probeAMQP(ctx, LocalRabbitMQ)
		if err == nil {
			rabbitURL = LocalRabbitMQ
			return
		}
		u, cerr := fromContainer(starter.RabbitMQ)
		if cerr != nil {
			rabbitReason = fmt.Sprintf("no RabbitMQ: $ACEMQ_RABBITMQ_URL is unset, %s does not answer (%v), and no container: %v; "+
				"set the variable or start a local broker", acemq.Redact(LocalRabbitMQ), err, cerr)
			return
		}
		rabbitURL = u
	})
	if rabbitURL == "" {
		missing(t, rabbitReason)
	}
	return rabbitURL
}

// Postgres returns the URL of a PostgreSQL database for the test: the
// value of $ACEMQ_POSTGRES_URL when set, else LocalPostgres when a server
// there answers PostgreSQL's SSLRequest (no SQL session is opened, so
// acemqtest needs no database driver), else a PostgresImage container when
// the test binary links package acemqtest/container and a Docker engine
// answers. When none is found the test is skipped with the
// reason, or fails when $ACEMQ_REQUIRE_BROKER is 1.
func Postgres(t testing.TB) string {
	t.Helper()
	pgOnce.Do(func() {
		if u := os.Getenv("ACEMQ_POSTGRES_URL"); u != "" {
			pgURL = u
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		err := probePostgres(ctx, "127.0.0.1:5432")
		if err == nil {
			pgURL = LocalPostgres
			return
		}
		u, cerr := fromContainer(starter.Postgres)
		if cerr != nil {
			pgReason = fmt.Sprintf("no PostgreSQL: $ACEMQ_POSTGRES_URL is unset, 127.0.0.1:5432 does not answer (%v), and no container: %v; "+
				"set the variable or start a local server", err, cerr)
			return
		}
		pgURL = u
	})
	if pgURL == "" {
		missing(t, pgReason)
	}
	return pgURL
}

// fromContainer starts a container with start, which package
// acemqtest/container provides when it is linked.
func fromContainer(start func() (string, error)) (string, error) {
	if start == nil {
		return "", errors.New(`this test binary does not import "github.com/acemq/acemq/acemqtest/container", which starts one in Docker`)
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

// probeAMQP opens and closes an AMQP connection, all within ctx.
func probeAMQP(ctx context.Context, rawURL string) error {
	conn, err := dialAMQP(ctx, rawURL)
	if err != nil {
		return err
	}
	return conn.Close()
}

// dialAMQP connects to rawURL, or to the first node of a URL list that
// accepts, all within ctx.
func dialAMQP(ctx context.Context, rawURL string) (*amqp.Connection, error) {
	var errs []error
	for _, u := range urls.Split(rawURL) {
		conn, err := amqp.DialConfig(u, amqp.Config{
			Dial: func(network, addr string) (net.Conn, error) {
				var d net.Dialer
				c, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				if dl, ok := ctx.Deadline(); ok {
					_ = c.SetDeadline(dl)
				}
				return c, nil
			},
		})
		if err == nil {
			return conn, nil
		}
		errs = append(errs, errors.New(urls.Scrub(err.Error(), u)))
	}
	return nil, errors.Join(errs...)
}

// probePostgres sends PostgreSQL's SSLRequest and expects its one-byte
// answer ('S' or 'N'): enough to know a PostgreSQL server listens.
func probePostgres(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
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
	conn, err := dialAMQP(ctx, rawURL)
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

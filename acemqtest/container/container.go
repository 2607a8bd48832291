// Package container lets acemqtest.RabbitMQ and acemqtest.Postgres start a
// broker or database in Docker (with testcontainers-go) when none answers
// in the environment or on this machine. Import it for that effect, in one
// test file of the package whose tests need it:
//
//	import _ "github.com/acemq/acemq/acemqtest/container"
//
// It is a package of its own so that test binaries that reach a broker by
// URL do not link, nor compile, the Docker client.
package container

import (
	"context"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/acemqtest/internal/starter"
)

func init() {
	starter.RabbitMQ = rabbitMQContainer
	starter.Postgres = postgresContainer
}

// containerTimeout bounds pulling and starting a container.
const containerTimeout = 3 * time.Minute

// dockerAnswers reports whether a Docker engine answers, so that a
// container can be started.
func dockerAnswers(ctx context.Context) error {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return err
	}
	return p.Health(ctx) // Health closes the provider
}

// startContainer starts image with port exposed, waits for it to listen,
// and returns host:port. The container is not stopped by acemqtest: it
// serves every test of the binary, and testcontainers' reaper removes it
// when the process ends.
func startContainer(image, port string, env map[string]string, ready wait.Strategy) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), containerTimeout)
	defer cancel()
	if err := dockerAnswers(ctx); err != nil {
		return "", fmt.Errorf("no Docker engine answers: %w", err)
	}
	c, err := testcontainers.Run(ctx, image,
		testcontainers.WithExposedPorts(port),
		testcontainers.WithEnv(env),
		testcontainers.WithWaitStrategyAndDeadline(containerTimeout, ready))
	if err != nil {
		return "", fmt.Errorf("starting %s: %w", image, err)
	}
	hostPort, err := c.PortEndpoint(ctx, port, "")
	if err != nil {
		_ = c.Terminate(context.Background())
		return "", fmt.Errorf("finding the port of %s: %w", image, err)
	}
	return hostPort, nil
}

// rabbitMQContainer starts acemqtest.RabbitMQImage and returns its AMQP URL.
func rabbitMQContainer() (string, error) {
	hostPort, err := startContainer(acemqtest.RabbitMQImage, "5672/tcp", nil,
		wait.ForAll(wait.ForListeningPort("5672/tcp"), wait.ForLog("Server startup complete")))
	if err != nil {
		return "", err
	}
	return "amqp://guest:guest@" + hostPort + "/", nil
}

// postgresContainer starts acemqtest.PostgresImage and returns its URL.
func postgresContainer() (string, error) {
	hostPort, err := startContainer(acemqtest.PostgresImage, "5432/tcp",
		map[string]string{"POSTGRES_PASSWORD": "postgres", "POSTGRES_DB": "test"},
		wait.ForAll(wait.ForListeningPort("5432/tcp"), wait.ForLog("database system is ready to accept connections").WithOccurrence(2)))
	if err != nil {
		return "", err
	}
	return "postgres://postgres:postgres@" + hostPort + "/test?sslmode=disable", nil
}

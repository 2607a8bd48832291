package acemqtest

import (
	"context"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// The images started when no broker or database answers locally.
const (
	RabbitMQImage = "rabbitmq:3.13-alpine"
	PostgresImage = "postgres:16-alpine"
)

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

// rabbitMQContainer starts RabbitMQImage and returns its AMQP URL.
func rabbitMQContainer() (string, error) {
	hostPort, err := startContainer(RabbitMQImage, "5672/tcp", nil,
		wait.ForAll(wait.ForListeningPort("5672/tcp"), wait.ForLog("Server startup complete")))
	if err != nil {
		return "", err
	}
	return "amqp://guest:guest@" + hostPort + "/", nil
}

// postgresContainer starts PostgresImage and returns its URL.
func postgresContainer() (string, error) {
	hostPort, err := startContainer(PostgresImage, "5432/tcp",
		map[string]string{"POSTGRES_PASSWORD": "postgres", "POSTGRES_DB": "test"},
		wait.ForAll(wait.ForListeningPort("5432/tcp"), wait.ForLog("database system is ready to accept connections").WithOccurrence(2)))
	if err != nil {
		return "", err
	}
	return "postgres://postgres:postgres@" + hostPort + "/test?sslmode=disable", nil
}

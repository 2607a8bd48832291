package container

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Without a Docker engine the container path must fail quickly, saying so,
// so that RabbitMQ and Postgres can skip (or fail) with the reason.
func TestContainerPathWithoutDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if dockerAnswers(ctx) == nil {
		t.Skip("a Docker engine answers here; the container path is exercised by RabbitMQ and Postgres when no local service runs")
	}
	for name, start := range map[string]func() (string, error){"rabbitmq": rabbitMQContainer, "postgres": postgresContainer} {
		u, err := start()
		if err == nil || u != "" {
			t.Fatalf("%s: started %q without a Docker engine", name, u)
		}
		if !strings.Contains(err.Error(), "no Docker engine answers") {
			t.Errorf("%s: error %q does not say Docker is missing", name, err)
		}
	}
}

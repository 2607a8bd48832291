// Package container lets acemqtest.RabbitMQ and acemqtest.Postgres start a
// broker or database in Docker, with testcontainers-go, when none answers
// in the environment or on this machine. A test binary gets that fallback
// by importing this package for its effect, in one of its test files:
//
//	import _ "github.com/acemq/acemq/acemqtest/container"
//
// It is a package of its own so that a test binary that reaches its
// broker by URL does not link, nor compile, the Docker client, and a
// module of its own (go get github.com/acemq/acemq/acemqtest/container) so
// that a module requiring only github.com/acemq/acemq does not carry
// testcontainers-go and the Docker client in its module graph. It reaches
// acemqtest through acemqtest/internal/starter, so each of its versions
// requires the acemq version it was released with.
//
// It starts at most one container per image per test binary, from
// acemqtest.RabbitMQImage and acemqtest.PostgresImage or the images
// $ACEMQ_RABBITMQ_IMAGE and $ACEMQ_POSTGRES_IMAGE name, and removes them
// when acemqtest.Main or acemqtest.Cleanup runs, or, however the test
// binary ends, through a watchdog process: the test binary run again,
// which this package's init recognises and turns into the watchdog before
// any test runs. Offline, set TESTCONTAINERS_RYUK_DISABLED=true.
// docs/testing.md says what is left behind, and when.
package container

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/acemqtest/internal/login"
	"github.com/acemq/acemq/acemqtest/internal/starter"
)

// init hands acemqtest the hooks that start and remove containers, or, in
// the test binary run again as the watchdog, runs the watchdog and exits.
func init() {
	if os.Getenv(watchdogEnv) == "1" {
		runWatchdog()
	}
	starter.RabbitMQ = rabbitMQContainer
	starter.Postgres = postgresContainer
	starter.Cleanup = removeStarted
}

// The environment variables that name another image.
const (
	rabbitMQImageEnv = "ACEMQ_RABBITMQ_IMAGE"
	postgresImageEnv = "ACEMQ_POSTGRES_IMAGE"
)

// loginTimeout bounds each login attempt of a wait strategy.
const loginTimeout = 2 * time.Second

// containerTimeout bounds pulling, starting and waiting for a container.
const containerTimeout = 3 * time.Minute

// stopTimeout is how long a container acemqtest removes may take to stop
// before it is killed: a test broker has nothing worth a graceful stop.
const stopTimeout = 2 * time.Second

// ownerLabel marks every container acemqtest starts with the token of the
// test binary that started it, which is how the watchdog finds them.
const ownerLabel = "dev.acemq.acemqtest.owner"

// image returns the value of the environment variable env, or def.
func image(env, def string) string {
	if v := strings.TrimSpace(os.Getenv(env)); v != "" {
		return v
	}
	return def
}

// started holds the containers this test binary started and not yet
// removed: acemqtest.Cleanup removes them, through starter.Cleanup.
var started struct {
	sync.Mutex
	list []*testcontainers.DockerContainer
}

// dockerAnswers reports whether a Docker engine answers, so that a
// container can be started.
func dockerAnswers(ctx context.Context) error {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return err
	}
	return p.Health(ctx) // Health closes the provider
}

// startContainer starts image with port exposed, waits until ready says
// it serves, and returns host:port. A container that was created but did
// not become ready is removed before the error is returned. The container
// serves every later test of the binary; acemqtest.Cleanup (or Main)
// removes it, and so does the watchdog when the binary ends without
// calling them.
func startContainer(image, port string, env map[string]string, ready wait.Strategy, opts ...testcontainers.ContainerCustomizer) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), containerTimeout)
	defer cancel()
	if err := dockerAnswers(ctx); err != nil {
		return "", fmt.Errorf("no Docker engine answers: %w", err)
	}
	startWatchdog()
	c, err := testcontainers.Run(ctx, image, append([]testcontainers.ContainerCustomizer{
		testcontainers.WithExposedPorts(port),
		testcontainers.WithEnv(env),
		testcontainers.WithLabels(map[string]string{ownerLabel: ownerToken}),
		testcontainers.WithWaitStrategyAndDeadline(containerTimeout, ready),
	}, opts...)...)
	if err != nil {
		err = fmt.Errorf("starting %s: %w", image, err)
		if c != nil && c.GetContainerID() != "" {
			err = errors.Join(err, logTail(c), removed(c))
		}
		return "", err
	}
	hostPort, err := c.PortEndpoint(ctx, port, "")
	if err != nil {
		return "", errors.Join(fmt.Errorf("finding the port of %s: %w", image, err), removed(c))
	}
	started.Lock()
	started.list = append(started.list, c)
	started.Unlock()
	return hostPort, nil
}

// removed terminates c and says whether that worked, for an error message.
func removed(c *testcontainers.DockerContainer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Terminate(ctx, testcontainers.StopTimeout(stopTimeout)); err != nil {
		return fmt.Errorf("removing container %.12s failed too: %w", c.GetContainerID(), err)
	}
	return fmt.Errorf("container %.12s removed", c.GetContainerID())
}

// logTail returns the last lines c logged, or nil when it logged nothing.
func logTail(c *testcontainers.DockerContainer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Logs(ctx)
	if err != nil {
		return nil
	}
	defer r.Close()
	var lines []string
	s := bufio.NewScanner(io.LimitReader(r, 1<<20))
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > 10 {
			lines = lines[1:]
		}
	}
	if len(lines) == 0 {
		return nil
	}
	return fmt.Errorf("its last log lines:\n\t%s", strings.Join(lines, "\n\t"))
}

// removeStarted terminates every container this binary started.
func removeStarted() error {
	started.Lock()
	list := started.list
	started.list = nil
	started.Unlock()
	var errs []error
	for _, c := range list {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := c.Terminate(ctx, testcontainers.StopTimeout(stopTimeout)); err != nil {
			errs = append(errs, fmt.Errorf("removing %s container %.12s: %w", c.Image, c.GetContainerID(), err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// offlineHint says how to run the container path without an image
// registry, naming the variable that overrides the image.
func offlineHint(env string) string {
	hint := "to run offline, load the image into the Docker engine or name a local one with $" + env
	if !testcontainers.ReadConfig().Config.RyukDisabled {
		hint += ", and set TESTCONTAINERS_RYUK_DISABLED=true (the reaper's image cannot be pulled either)"
	}
	return hint + "; see docs/testing.md"
}

// enabledPlugins is the enabled-plugins file the RabbitMQ container starts
// with: ordered consumers need the consistent-hash exchange, which RabbitMQ
// ships but does not enable.
const enabledPlugins = "[rabbitmq_consistent_hash_exchange].\n"

// rabbitMQContainer starts the RabbitMQ image and returns its AMQP URL, or
// an error that says how to run offline.
func rabbitMQContainer() (string, error) {
	img := image(rabbitMQImageEnv, acemqtest.RabbitMQImage)
	hostPort, err := startContainer(img, "5672/tcp", nil,
		loginWait("5672/tcp", func(ctx context.Context, hostPort string) error {
			return login.AMQP(ctx, "amqp://guest:guest@"+hostPort+"/")
		}),
		testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader:            strings.NewReader(enabledPlugins),
			ContainerFilePath: "/etc/rabbitmq/enabled_plugins",
			FileMode:          0o644,
		}))
	if err != nil {
		return "", fmt.Errorf("%w; %s", err, offlineHint(rabbitMQImageEnv))
	}
	return "amqp://guest:guest@" + hostPort + "/", nil
}

// The account, password and database the PostgreSQL container is started
// with, through the variables the official image reads.
const (
	containerPGUser     = "postgres"
	containerPGPassword = "postgres"
	containerPGDatabase = "test"
)

// postgresContainer starts the PostgreSQL image and returns its URL, or an
// error that says how to run offline.
func postgresContainer() (string, error) {
	img := image(postgresImageEnv, acemqtest.PostgresImage)
	url := func(hostPort string) string {
		return "postgres://" + containerPGUser + ":" + containerPGPassword + "@" + hostPort + "/" + containerPGDatabase + "?sslmode=disable"
	}
	hostPort, err := startContainer(img, "5432/tcp",
		map[string]string{"POSTGRES_USER": containerPGUser, "POSTGRES_PASSWORD": containerPGPassword, "POSTGRES_DB": containerPGDatabase},
		loginWait("5432/tcp", func(ctx context.Context, hostPort string) error {
			return login.Postgres(ctx, url(hostPort))
		}))
	if err != nil {
		return "", fmt.Errorf("%w; %s", err, offlineHint(postgresImageEnv))
	}
	return url(hostPort), nil
}

// loginWait is a wait strategy that works for any image: it is ready when
// a client logs in through the mapped port (and, for PostgreSQL, runs a
// query), not when the image prints a line of its own.
func loginWait(port string, logIn func(ctx context.Context, hostPort string) error) wait.Strategy {
	return loginStrategy{port: port, login: logIn}
}

type loginStrategy struct {
	port  string
	login func(ctx context.Context, hostPort string) error
}

// WaitUntilReady tries to log in every quarter second until it succeeds,
// the container stops running, or ctx ends.
func (s loginStrategy) WaitUntilReady(ctx context.Context, target wait.StrategyTarget) error {
	last := errors.New("not tried")
	for {
		if state, err := target.State(ctx); err == nil && !state.Running {
			return fmt.Errorf("the container stopped (%s, exit code %d) before it served on %s; last login attempt: %w",
				state.Status, state.ExitCode, s.port, last)
		}
		if hostPort, err := endpoint(ctx, target, s.port); err != nil {
			last = err
		} else {
			tctx, cancel := context.WithTimeout(ctx, loginTimeout)
			last = s.login(tctx, hostPort)
			cancel()
			if last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready on %s: %w; last login attempt: %w", s.port, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// endpoint returns host:port of the container's port as seen from here.
func endpoint(ctx context.Context, target wait.StrategyTarget, port string) (string, error) {
	host, err := target.Host(ctx)
	if err != nil {
		return "", err
	}
	mapped, err := target.MappedPort(ctx, port)
	if err != nil {
		return "", err
	}
	return host + ":" + mapped.Port(), nil
}

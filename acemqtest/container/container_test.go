package container

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/acemqtest/internal/starter"
)

// Importing the package hands acemqtest its hooks, so that RabbitMQ,
// Postgres and Cleanup reach the container code.
func TestInitRegistersTheHooks(t *testing.T) {
	if starter.RabbitMQ == nil || starter.Postgres == nil || starter.Cleanup == nil {
		t.Fatalf("hooks after init: RabbitMQ %t, Postgres %t, Cleanup %t; want all set",
			starter.RabbitMQ != nil, starter.Postgres != nil, starter.Cleanup != nil)
	}
}

// Without a Docker engine the container path must fail quickly, saying so,
// so that RabbitMQ and Postgres can skip (or fail) with the reason.
func TestContainerPathWithoutDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if dockerAnswers(ctx) == nil {
		t.Skip("a Docker engine answers here; TestContainerFailuresLeaveNothing covers the container path")
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

func TestImageOverride(t *testing.T) {
	t.Setenv(rabbitMQImageEnv, "")
	if got := image(rabbitMQImageEnv, acemqtest.RabbitMQImage); got != acemqtest.RabbitMQImage {
		t.Errorf("unset: %q, want the default %q", got, acemqtest.RabbitMQImage)
	}
	t.Setenv(rabbitMQImageEnv, " registry.local/rabbitmq:3.10 ")
	if got := image(rabbitMQImageEnv, acemqtest.RabbitMQImage); got != "registry.local/rabbitmq:3.10" {
		t.Errorf("set: %q", got)
	}
}

func TestOfflineHintNamesTheVariables(t *testing.T) {
	hint := offlineHint(postgresImageEnv)
	if !strings.Contains(hint, "$"+postgresImageEnv) || !strings.Contains(hint, "docs/testing.md") {
		t.Errorf("hint %q names neither the image variable nor the docs", hint)
	}
}

// stepTarget is a container whose state and port a test script sets.
type stepTarget struct {
	wait.StrategyTarget // nil: only the methods below are called
	running             bool
}

func (s *stepTarget) State(context.Context) (*container.State, error) {
	return &container.State{Running: s.running, Status: map[bool]container.ContainerState{true: "running", false: "exited"}[s.running], ExitCode: 3}, nil
}
func (s *stepTarget) Host(context.Context) (string, error) { return "127.0.0.1", nil }
func (s *stepTarget) MappedPort(_ context.Context, p string) (network.Port, error) {
	return network.ParsePort(p)
}

func TestLoginWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		running  bool
		failures int // login attempts that fail before one succeeds
		timeout  time.Duration
		wantErr  string
	}{
		{name: "ready after two refusals", running: true, failures: 2, timeout: 5 * time.Second},
		{name: "never ready", running: true, failures: 1 << 30, timeout: 600 * time.Millisecond, wantErr: "last login attempt: refused"},
		{name: "the container exited", running: false, timeout: 5 * time.Second, wantErr: "the container stopped (exited, exit code 3)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			attempts := 0
			s := loginWait("5999/tcp", func(_ context.Context, hostPort string) error {
				if hostPort != "127.0.0.1:5999" {
					t.Errorf("login to %q", hostPort)
				}
				attempts++
				if attempts <= tt.failures {
					return errors.New("refused")
				}
				return nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			err := s.WaitUntilReady(ctx, &stepTarget{running: tt.running})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("not ready: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			case tt.wantErr == "" && attempts != tt.failures+1:
				t.Fatalf("%d attempts, want %d", attempts, tt.failures+1)
			}
		})
	}
}

func TestWatchRemovesOnlyAtTheEnd(t *testing.T) {
	t.Parallel()
	r, w := io.Pipe()
	removed := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- watch(r, func(context.Context) error { close(removed); return errors.New("engine gone") })
	}()
	_, _ = w.Write([]byte("still alive\n"))
	select {
	case <-removed:
		t.Fatal("removed while the pipe was open")
	case <-time.After(100 * time.Millisecond):
	}
	_ = w.Close()
	if err := <-done; err == nil || err.Error() != "engine gone" {
		t.Fatalf("watch returned %v, want the removal's error", err)
	}
}

// dockerOrSkip skips a test that needs a Docker engine (make
// test-container provides one).
func dockerOrSkip(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := dockerAnswers(ctx); err != nil {
		t.Skipf("no Docker engine (%v); make test-container runs this test", err)
	}
}

// ownedNow lists the containers labelled with owner.
func ownedNow(t *testing.T, owner string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ids, err := owned(ctx, cli, owner)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// Whichever way starting a container fails — the image cannot be had, the
// container cannot start, it never becomes ready — nothing is left behind
// and the error says the container was removed when there was one.
func TestContainerFailuresLeaveNothing(t *testing.T) {
	dockerOrSkip(t)
	img := image(rabbitMQImageEnv, acemqtest.RabbitMQImage)
	never := strategyFunc(func(context.Context, wait.StrategyTarget) error { return errors.New("never ready") })
	ready := strategyFunc(func(context.Context, wait.StrategyTarget) error { return nil })
	tests := []struct {
		name    string
		image   string
		ready   wait.Strategy
		opts    []testcontainers.ContainerCustomizer
		wantErr []string
	}{
		{name: "no such image", image: "acemq.invalid/no-such-image:0", ready: ready, wantErr: []string{"starting acemq.invalid/no-such-image:0"}},
		{name: "cannot start", image: img, ready: ready,
			opts:    []testcontainers.ContainerCustomizer{testcontainers.WithEntrypoint("/acemq-no-such-entrypoint")},
			wantErr: []string{"starting " + img, "removed"}},
		{name: "never ready", image: img, ready: never, wantErr: []string{"never ready", "removed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Containers of this binary that serve other tests stay.
			before := ownedNow(t, ownerToken)
			u, err := startContainer(tt.image, "5672/tcp", nil, tt.ready, tt.opts...)
			if err == nil {
				_ = acemqtest.Cleanup()
				t.Fatalf("started %s", u)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			for _, id := range ownedNow(t, ownerToken) {
				if !slices.Contains(before, id) {
					t.Errorf("container %.12s left behind", id)
				}
			}
		})
	}
}

// A test binary that ends without Cleanup — here it exits at once, as a
// panic or a timeout would end it — still has its container removed, by
// the watchdog. The binary is this one, run again as a helper.
func TestWatchdogRemovesAfterAnAbruptExit(t *testing.T) {
	if os.Getenv("ACEMQTEST_HELPER") == "1" {
		return // the helper is TestHelperStartAndExit
	}
	dockerOrSkip(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestHelperStartAndExit$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ACEMQTEST_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var owner string
	s := bufio.NewScanner(out)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "owner="); ok {
			owner = v
		}
	}
	err = cmd.Wait()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("the helper ended with %v, want exit status 3", err)
	}
	if owner == "" {
		t.Fatal("the helper started no container")
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(ownedNow(t, owner)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the helper's container is still there 30s after it exited")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestHelperStartAndExit is TestWatchdogRemovesAfterAnAbruptExit's helper:
// it starts a container, checks it is there, and exits without cleaning up.
func TestHelperStartAndExit(t *testing.T) {
	if os.Getenv("ACEMQTEST_HELPER") != "1" {
		t.Skip("run by TestWatchdogRemovesAfterAnAbruptExit")
	}
	ready := strategyFunc(func(context.Context, wait.StrategyTarget) error { return nil })
	if _, err := startContainer(image(rabbitMQImageEnv, acemqtest.RabbitMQImage), "5672/tcp", nil, ready); err != nil {
		t.Fatal(err)
	}
	if n := len(ownedNow(t, ownerToken)); n != 1 {
		t.Fatalf("%d containers with this binary's label, want 1", n)
	}
	os.Stdout.WriteString("owner=" + ownerToken + "\n")
	os.Exit(3)
}

// strategyFunc is a wait strategy made of a function.
type strategyFunc func(context.Context, wait.StrategyTarget) error

func (f strategyFunc) WaitUntilReady(ctx context.Context, t wait.StrategyTarget) error {
	return f(ctx, t)
}

// The test binary run again with the watchdog's variable is the watchdog,
// not the tests: this package's init takes over before any test runs,
// waits for the end of its standard input, and exits with what the
// removal said (here an error: it was given no owner token).
func TestInitTurnsTheBinaryIntoTheWatchdog(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestInitRegistersTheHooks$", "-test.v")
	cmd.Env = append(os.Environ(), watchdogEnv+"=1", watchdogOwner+"=")
	cmd.Stdin = strings.NewReader("") // the watched binary has ended
	out, err := cmd.CombinedOutput()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("the watchdog ended with %v, want exit status 1; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "acemqtest watchdog: ") {
		t.Errorf("the watchdog did not report its failed removal; output:\n%s", out)
	}
	if strings.Contains(string(out), "TestInitRegistersTheHooks") {
		t.Errorf("the watchdog ran tests; output:\n%s", out)
	}
}

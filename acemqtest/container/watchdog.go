package container

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

// The watchdog is a second process, the test binary started again with
// watchdogEnv set, that removes this binary's containers once the binary
// has ended however it ended: returned, failed, panicked, timed out or was
// killed. It waits for the end of its standard input, a pipe whose only
// writer is this process, and then removes every container labelled with
// ownerToken. Removing a container Cleanup already removed is not an error.
const (
	watchdogEnv   = "ACEMQTEST_WATCHDOG"
	watchdogOwner = "ACEMQTEST_WATCHDOG_OWNER"
)

// ownerToken names this test binary's containers.
var ownerToken = newToken()

func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
}

// runWatchdog is the watchdog's life: the init of this package calls it,
// in the test binary run again with watchdogEnv set, and it exits when the
// containers are removed.
func runWatchdog() {
	// The terminal's interrupt must not end the watchdog before the test
	// binary it watches, and testcontainers' chatter is not the tests'.
	signal.Ignore(os.Interrupt)
	tclog.SetDefault(tclog.NewNoopLogger())
	err := watch(os.Stdin, func(ctx context.Context) error {
		return removeOwned(ctx, os.Getenv(watchdogOwner))
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "acemqtest watchdog: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// watch waits for the end of r, then calls remove.
func watch(r io.Reader, remove func(context.Context) error) error {
	_, _ = io.Copy(io.Discard, bufio.NewReader(r))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return remove(ctx)
}

// The watchdog is started once, before the first container.
var (
	watchdogOnce sync.Once
	// watchdogPipe is the write end of the watchdog's standard input,
	// kept open (and referenced) for the life of the process.
	//lint:ignore U1000 written and never read: the reference keeps the file's finalizer from closing the pipe, which would end the watchdog's wait
	watchdogPipe *os.File
)

// startWatchdog starts the watchdog process. When it cannot be started,
// it says so on standard error: the containers are then removed only by
// Cleanup, Main or testcontainers' reaper.
func startWatchdog() {
	watchdogOnce.Do(func() {
		if err := spawnWatchdog(); err != nil {
			fmt.Fprintf(os.Stderr, "acemqtest: no watchdog to remove containers when the test binary ends (%v); "+
				"call acemqtest.Cleanup from TestMain\n", err)
		}
	})
}

func spawnWatchdog() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), watchdogEnv+"=1", watchdogOwner+"="+ownerToken)
	cmd.Stdin = r
	// Its complaints reach the same place as the tests' output; go test
	// waits for them, and so for the removal, before it reports.
	cmd.Stderr = os.Stderr
	detach(cmd)
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return err
	}
	_ = r.Close()
	// Never waited for: the watchdog outlives this process by design.
	_ = cmd.Process.Release()
	watchdogPipe = w
	return nil
}

// removeOwned removes every container labelled as owner's, running or not.
func removeOwned(ctx context.Context, owner string) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	ids, err := owned(ctx, cli, owner)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		_, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing container %.12s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// owned lists the IDs of the containers labelled as owner's.
func owned(ctx context.Context, cli *testcontainers.DockerClient, owner string) ([]string, error) {
	if owner == "" {
		return nil, errors.New("no owner token")
	}
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", ownerLabel+"="+owner),
	})
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	ids := make([]string, 0, len(list.Items))
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

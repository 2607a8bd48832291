// Package brokerctl runs rabbitmqctl for the tests and tools that ask the
// broker what AMQP cannot (a vhost's default queue type, a queue's type) or
// change it: the machine's broker by default, or the node named by
// $ACEMQ_RABBITMQCTL, a command prefix that replaces "rabbitmqctl"
// (scripts/rabbitmq4.sh sets it to reach the RabbitMQ 4.x node it starts
// in a chroot).
package brokerctl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Var is the environment variable holding the rabbitmqctl command prefix.
const Var = "ACEMQ_RABBITMQCTL"

// prefix is $ACEMQ_RABBITMQCTL split on spaces, or rabbitmqctl.
func prefix() []string {
	if f := strings.Fields(os.Getenv(Var)); len(f) > 0 {
		return f
	}
	return []string{"rabbitmqctl"}
}

// Available says why rabbitmqctl cannot be run here, or nil.
func Available() error {
	p := prefix()
	if _, err := exec.LookPath(p[0]); err != nil {
		return fmt.Errorf("brokerctl: %s is not on PATH (set %s to a rabbitmqctl that reaches the broker under test): %w", p[0], Var, err)
	}
	return nil
}

// Run runs rabbitmqctl with args and returns its standard output; the
// error names the command and carries what it wrote to standard error.
func Run(ctx context.Context, args ...string) (string, error) {
	p := prefix()
	cmd := exec.CommandContext(ctx, p[0], append(p[1:len(p):len(p)], args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.String(), fmt.Errorf("brokerctl: rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/internal/urls"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// localURL is the broker tried when neither -url nor $ACEMQ_RABBITMQ_URL
// names one: RabbitMQ's out-of-the-box guest account on this machine.
const localURL = "amqp://guest:guest@127.0.0.1:5672/"

// command is one subcommand: it parses its own arguments and does its work.
type command struct {
	name    string
	args    string // the positional arguments, for the usage line
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
}

// commands are the subcommands, in the order the usage lists them.
var commands = []command{
	{"stats", "QUEUE... [-delays D,D...]", "ready and consumer counts of each queue, its .dlq, .parked and retry tiers", runStats},
	{"peek", "QUEUE [-n N] [-body BYTES] [-v]", "show the envelopes of the first N messages; nothing is consumed", runPeek},
	{"replay", "FROM TO [-limit N] [-type T] [-rate R] [-progress D]", "move messages from FROM (a .dlq or .parked) back to TO", runReplay},
	{"keys", "list QUEUE | release QUEUE KEY", "list the blocked keys of an ordered queue, or release one", runKeys},
	{"outbox", "dead|replay [ID...|-all] [-db URL] [-table T] [-n N]", "list an outbox table's dead-lettered rows, or replay them", runOutbox},
	{"blob", "sweep -store dir:PATH|postgres://...|sqlite:PATH [-table T]", "delete the expired objects of a large-payload store", runBlob},
	{"console", "[QUEUE...] [-addr HOST:PORT] [-token T] [-write] [-outbox-db URL]", "serve a web page of the queues, their dead letters and blocked keys", runConsole},
	{"saga", "show NAME ID | list NAME [-open] [-limit N]  -db URL", "show a saga instance's state, or list a saga's instances", runSaga},
}

// cli is one invocation: where output goes and the global settings, which
// each subcommand accepts again after its name.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	url            string
	timeout        time.Duration
	// inProcess allows memory:// URLs: only the command's own tests run it
	// in the process that holds such a broker.
	inProcess bool
}

// memoryInProcess is cli.inProcess for every run; the tests set it.
var memoryInProcess = false

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// run is the whole command: it parses args (without the program name),
// runs the subcommand against the broker and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr, getenv: os.Getenv, timeout: 10 * time.Second, inProcess: memoryInProcess}
	fs := flag.NewFlagSet("acemq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.commonFlags(fs)
	fs.Usage = func() { c.usage(fs.Output()) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "acemq: no command given")
		c.usage(stderr)
		return exitUsage
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		c.usage(stdout)
		return exitOK
	}
	for _, cmd := range commands {
		if cmd.name == name {
			return c.report(cmd.run(ctx, c, rest))
		}
	}
	fmt.Fprintf(stderr, "acemq: unknown command %q\n", name)
	c.usage(stderr)
	return exitUsage
}

// report prints err, if any, and maps it to an exit status.
func (c *cli) report(err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "acemq: %s (acemq -h for help)\n", ue.msg)
		return exitUsage
	}
	fmt.Fprintln(c.stderr, scrub(err.Error(), c.brokerURL()))
	return exitFailure
}

func (c *cli) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: acemq [-url URL] [-timeout D] COMMAND [ARGS]\n\ncommands:\n")
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %s %s\n      %s\n", cmd.name, cmd.args, cmd.summary)
	}
	fmt.Fprintf(w, "\nThe broker is -url, else $ACEMQ_RABBITMQ_URL, else %s.\n", acemq.Redact(localURL))
	fmt.Fprintf(w, "-timeout bounds connecting (default 10s). Each command takes -h.\n")
	fmt.Fprintf(w, "Exit status: 0 done, 1 failed, 2 usage error.\n")
}

// commonFlags registers -url and -timeout on fs, defaulting to what c has
// already, so they may be given before or after the command's name.
func (c *cli) commonFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", c.url, "the broker's `URL` (default $ACEMQ_RABBITMQ_URL, else the local guest account)")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "how long to wait for the broker to answer when connecting")
}

// flags returns the flag set of a subcommand, with the common flags.
func (c *cli) flags(name, positional, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet("acemq "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	c.commonFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: acemq %s %s\n  %s\n\nflags:\n", name, positional, summary)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args with fs, letting flags and positional arguments mix
// ("peek orders.dlq -n 5"), and returns the positional ones. A "--" ends
// the flags: what follows is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// brokerURL is -url, else $ACEMQ_RABBITMQ_URL, else the local broker.
func (c *cli) brokerURL() string {
	if c.url != "" {
		return c.url
	}
	if u := c.getenv("ACEMQ_RABBITMQ_URL"); u != "" {
		return u
	}
	return localURL
}

// connect opens a Conn on the broker, waiting at most -timeout. Its log
// lines below a warning are dropped: the output is the command's.
func (c *cli) connect(ctx context.Context) (*acemq.Conn, error) {
	if c.timeout <= 0 {
		return nil, usagef("-timeout must be positive, not %s", c.timeout)
	}
	url := c.brokerURL()
	if !c.inProcess && urls.Scheme(url) == "memory" {
		return nil, fmt.Errorf("acemq: %s is an in-process broker: it lives inside the program that uses it, and no other process, this command included, can see it; point -url at RabbitMQ", url)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mq, err := acemq.Connect(cctx, url, acemq.WithLogger(logger))
	if err != nil {
		// The error names the URL, redacted by the transport; report
		// scrubs it again on the way out.
		return nil, err
	}
	return mq, nil
}

// scrub hides rawURL's passwords in s (internal/urls.Scrub: the URL's
// entries, their passwords plain and escaped).
func scrub(s, rawURL string) string {
	return urls.Scrub(s, rawURL)
}

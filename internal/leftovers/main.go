// Command leftovers lists the queues and exchanges acemq's tests left on the
// broker, and fails when there are any: `make test` ends with it, so a test
// that forgets to delete what it declared is found the run it is written.
// It asks rabbitmqctl (no management plugin needed), so it sees the broker
// of this machine, or the one $ACEMQ_RABBITMQCTL reaches (internal/brokerctl);
// without rabbitmqctl it says so and passes, unless ACEMQ_REQUIRE_BROKER=1.
//
//	go run ./internal/leftovers          # list, exit 1 if any
//	go run ./internal/leftovers -delete  # delete them through AMQP
//
// A test name is one the test helpers make: transporttest's "tt.<subtest>.…"
// and acemqtest.QueueName's "<base>.<TestName>.<random>…", whose test
// name starts with Test, Example, Fuzz or Benchmark.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/internal/brokerctl"
)

// testName matches the names the test helpers make.
var testName = regexp.MustCompile(`^tt\.|(^|\.)(Test|Example|Fuzz|Benchmark)[A-Za-z0-9_]`)

func main() {
	del := flag.Bool("delete", false, "delete what is left, through AMQP at $ACEMQ_RABBITMQ_URL")
	flag.Parse()
	url := os.Getenv("ACEMQ_RABBITMQ_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	if err := run(url, *del); err != nil {
		fmt.Fprintln(os.Stderr, "leftovers:", err)
		os.Exit(1)
	}
}

func run(url string, del bool) error {
	uri, err := amqp.ParseURI(url)
	if err != nil {
		return fmt.Errorf("$ACEMQ_RABBITMQ_URL: %w", err)
	}
	if strings.Contains(url, ",") {
		return fmt.Errorf("$ACEMQ_RABBITMQ_URL names several nodes; point it at one")
	}
	if err := brokerctl.Available(); err != nil {
		if os.Getenv("ACEMQ_REQUIRE_BROKER") == "1" {
			return fmt.Errorf("what the tests left on the broker cannot be listed: %w", err)
		}
		fmt.Printf("leftovers: not checking what the tests left on the broker: %v\n", err)
		return nil
	}
	vhost := uri.Vhost
	if vhost == "" {
		vhost = "/"
	}
	queues, err := list("list_queues", vhost)
	if err != nil {
		return err
	}
	exchanges, err := list("list_exchanges", vhost)
	if err != nil {
		return err
	}
	if len(queues)+len(exchanges) == 0 {
		fmt.Println("leftovers: the tests left no queue or exchange on the broker")
		return nil
	}
	if del {
		return remove(url, queues, exchanges)
	}
	for _, q := range queues {
		fmt.Println("queue   ", q)
	}
	for _, x := range exchanges {
		fmt.Println("exchange", x)
	}
	return fmt.Errorf("the tests left %d queues and %d exchanges on vhost %q (listed above): a test declared them without deleting them; "+
		"`go run ./internal/leftovers -delete` removes them", len(queues), len(exchanges), vhost)
}

// list returns the names of test queues or exchanges rabbitmqctl lists.
func list(what, vhost string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := brokerctl.Run(ctx, "-q", what, "-p", vhost, "--no-table-headers", "name")
	if err != nil {
		return nil, err
	}
	var names []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if name := strings.TrimSpace(sc.Text()); testName.MatchString(name) {
			names = append(names, name)
		}
	}
	return names, sc.Err()
}

// remove deletes queues and exchanges through AMQP.
func remove(url string, queues, exchanges []string) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("deleting queue %q: %w", q, err)
		}
		fmt.Println("deleted queue   ", q)
	}
	for _, x := range exchanges {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return fmt.Errorf("deleting exchange %q: %w", x, err)
		}
		fmt.Println("deleted exchange", x)
	}
	return nil
}

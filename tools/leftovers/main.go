// Command leftovers lists the queues and exchanges acemq's tests left on the
// broker, and fails when there are any: `make test` ends with it, so a test
// that forgets to delete what it declared is found the run it is written.
// It asks rabbitmqctl (no management plugin needed), so it sees the broker
// of this machine, or the one $ACEMQ_RABBITMQCTL reaches (tools/brokerctl);
// without rabbitmqctl it says so and passes, unless ACEMQ_REQUIRE_BROKER=1.
//
//	go run ./tools/leftovers          # list, exit 1 if any
//	go run ./tools/leftovers -delete  # delete them through AMQP
//
// A test name is one the test helpers make: transporttest's "tt.<subtest>.…"
// and acemqtest.QueueName's "<base>.<TestName>.<random>…", whose test
// name starts with Test, Example, Fuzz or Benchmark.
//
// The delay topology (acemq.delay.*, SPEC §20) is one per vhost, shared by
// every test that sends a delayed message, so no test can delete it while
// others may still use it; it is deleted here, once the run is over. Empty
// and with no forwarder subscribed, it is deleted and the check passes; a
// message still in it is one a test sent and did not wait for (or left
// unroutable), and is reported like a queue left behind.
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

	"github.com/acemq/acemq/tools/brokerctl"
)

// testName matches the names the test helpers make.
var testName = regexp.MustCompile(`^tt\.|(^|\.)(Test|Example|Fuzz|Benchmark)[A-Za-z0-9_]`)

// delayPrefix starts the name of every queue of the delay topology
// (internal/delay, which this module cannot import).
const delayPrefix = "acemq.delay."

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
	delays, busy, err := settledDelayTopology(vhost)
	if err != nil {
		return err
	}
	if len(busy) == 0 || del {
		if err := remove(url, delays, nil, false); err != nil {
			return err
		}
		if len(delays) > 0 {
			fmt.Printf("leftovers: deleted the delay topology the tests declared (%d queues, empty and idle)\n", len(delays))
		}
	} else {
		queues = append(queues, busy...)
	}
	if len(queues)+len(exchanges) == 0 {
		fmt.Println("leftovers: the tests left no queue or exchange on the broker")
		return nil
	}
	if del {
		return remove(url, queues, exchanges, true)
	}
	for _, q := range queues {
		fmt.Println("queue   ", q)
	}
	for _, x := range exchanges {
		fmt.Println("exchange", x)
	}
	return fmt.Errorf("the tests left %d queues and %d exchanges on vhost %q (listed above): a test declared them without deleting them; "+
		"`go run ./tools/leftovers -delete` removes them", len(queues), len(exchanges), vhost)
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

// settledDelayTopology is delayTopology once no consumer is left on it,
// or after consumerGrace. A consumer with no message to forward is the
// forwarder of a Conn a test process closed (or lost as it exited) a
// moment ago: the broker drops it once it has seen the connection go,
// which may be after the test binary has exited. A message, on the
// other hand, is a leftover at once.
func settledDelayTopology(vhost string) (all, busy []string, err error) {
	deadline := time.Now().Add(consumerGrace)
	for {
		all, busy, consumersOnly, err := delayTopology(vhost)
		if err != nil || len(busy) == 0 || !consumersOnly || time.Now().After(deadline) {
			return all, busy, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// consumerGrace is how long a consumer may stay on the delay topology
// after the tests ended before it counts as a Conn left open.
const consumerGrace = 15 * time.Second

// delayTopology returns the queues of the delay topology on vhost, and
// those of them that hold a message or have a consumer, described.
// consumersOnly reports that none of the busy ones holds a message.
func delayTopology(vhost string) (all, busy []string, consumersOnly bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := brokerctl.Run(ctx, "-q", "list_queues", "-p", vhost, "--no-table-headers", "name", "messages", "consumers")
	if err != nil {
		return nil, nil, false, err
	}
	consumersOnly = true
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || !strings.HasPrefix(f[0], delayPrefix) {
			continue
		}
		all = append(all, f[0])
		switch {
		case f[1] != "0":
			consumersOnly = false
			busy = append(busy, fmt.Sprintf("%s (%s messages, %s consumers: a delayed message a test did not wait for)", f[0], f[1], f[2]))
		case f[2] != "0":
			busy = append(busy, fmt.Sprintf("%s (0 messages, %s consumers: a Conn a test did not close)", f[0], f[2]))
		}
	}
	return all, busy, consumersOnly, sc.Err()
}

// remove deletes queues and exchanges through AMQP, naming each when
// verbose.
func remove(url string, queues, exchanges []string, verbose bool) error {
	if len(queues)+len(exchanges) == 0 {
		return nil
	}
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
		if verbose {
			fmt.Println("deleted queue   ", q)
		}
	}
	for _, x := range exchanges {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return fmt.Errorf("deleting exchange %q: %w", x, err)
		}
		if verbose {
			fmt.Println("deleted exchange", x)
		}
	}
	return nil
}

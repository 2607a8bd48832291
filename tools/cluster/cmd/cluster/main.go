// Command cluster starts or removes a three-node RabbitMQ cluster on this
// machine for trying acemq against one: `make cluster` and
// `make cluster-down` run it. The nodes are acemq-n1..3@localhost on AMQP
// ports 5801-5803, beside the machine's own broker, which is left alone.
//
//	go run ./tools/cluster/cmd/cluster up     # prints the URL list
//	go run ./tools/cluster/cmd/cluster kill 2 # SIGKILL node 2
//	go run ./tools/cluster/cmd/cluster start 2
//	go run ./tools/cluster/cmd/cluster down
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"

	"github.com/acemq/acemq/tools/cluster"
)

func main() {
	name := flag.String("name", "acemq-n", "node name prefix: nodes are {name}1@localhost and up")
	port := flag.Int("port", 5801, "AMQP port of node 1; node i listens on port+i-1")
	nodes := flag.Int("nodes", 3, "how many nodes")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: cluster [flags] up | down | kill N | stop N | start N\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	// The environment (ACEMQ_CLUSTER_ROOT and the others cluster.FromEnv
	// reads) overrides the flags: how scripts/rabbitmq4.sh runs 4.x nodes.
	cfg, err := cluster.FromEnv(cluster.Config{Name: *name, BasePort: *port, Nodes: *nodes, Logf: log.Printf})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, flag.Args()); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg cluster.Config, args []string) error {
	if len(args) == 0 {
		flag.Usage()
		return fmt.Errorf("cluster: no command")
	}
	switch args[0] {
	case "up":
		c, err := cluster.Start(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("export ACEMQ_RABBITMQ_URL=%s\n", c.URLs())
		return nil
	case "down":
		return cluster.Down(cfg)
	case "kill", "stop", "start":
		if len(args) != 2 {
			return fmt.Errorf("cluster: %s needs a node number", args[0])
		}
		i, err := strconv.Atoi(args[1])
		if err != nil || i < 1 || i > max(cfg.Nodes, 1) {
			return fmt.Errorf("cluster: %q is not a node number (1 to %d)", args[1], cfg.Nodes)
		}
		n := cluster.Attach(cfg).Nodes[i-1]
		switch args[0] {
		case "kill":
			return n.Kill()
		case "stop":
			return n.Stop(ctx)
		default:
			return n.Start(ctx)
		}
	}
	return fmt.Errorf("cluster: unknown command %q", args[0])
}

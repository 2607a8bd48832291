// Command cluster sends and handles orders on a RabbitMQ cluster and keeps
// going while a node is lost. It connects to the URL list in
// $ACEMQ_RABBITMQ_URL (by default the three nodes `make cluster` starts)
// with quorum queues, runs 8 senders and a consumer, and prints once a
// second what was confirmed and handled and which node it is on:
//
//	make cluster
//	go run ./tools/examples/cluster -kill      # kills the node in use after 5 s
//	make cluster-down
//
// With -kill it SIGKILLs the node it is connected to (one of make
// cluster's) and starts it again later; without it, kill one yourself
// (go run ./tools/cluster/cmd/cluster kill 2) and watch. At the end it
// checks that every confirmed order was handled and exits 1 if one was not.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/tools/cluster"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// Order is what the example sends.
type Order struct {
	ID string `json:"id"`
}

const queue = "acemq-example-cluster"

// makeCluster is the cluster `make cluster` starts.
var makeCluster = cluster.Config{Name: "acemq-n", BasePort: 5801}

func main() {
	run := flag.Duration("for", 20*time.Second, "how long to send")
	kill := flag.Bool("kill", false, "SIGKILL the node in use after 5s (make cluster's nodes only) and start it again")
	flag.Parse()
	urls := os.Getenv("ACEMQ_RABBITMQ_URL")
	if urls == "" {
		urls = cluster.Attach(makeCluster).URLs()
	}
	if err := tour(urls, *run, *kill); err != nil {
		fmt.Fprintln(os.Stderr, "cluster example:", err)
		os.Exit(1)
	}
}

func tour(urls string, run time.Duration, kill bool) error {
	fmt.Println("nodes:", acemq.Redact(urls))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	mq, err := acemq.Connect(ctx, urls, acemq.WithQuorumQueues(), acemq.WithLogger(log))
	if err != nil {
		return err
	}
	defer mq.Close()

	var (
		mu        sync.Mutex
		confirmed = map[string]bool{}
		handled   = map[string]bool{}
		failed    atomic.Int64
	)
	orders, err := acemq.NewConsumer(mq, queue, func(_ context.Context, m *acemq.Message[Order]) acemq.Ack {
		mu.Lock()
		handled[m.Payload.ID] = true
		mu.Unlock()
		return acemq.Done()
	}, acemq.Concurrency(4))
	if err != nil {
		return err
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- orders.Run(runCtx) }()
	defer stopRun()

	pub := acemq.NewPublisher[Order](mq, "", queue)
	stop := make(chan struct{})
	var senders sync.WaitGroup
	stopSenders := sync.OnceFunc(func() { close(stop); senders.Wait() })
	defer stopSenders()
	for g := range 8 {
		senders.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond): // about 4,000 orders a second in all
				}
				id := fmt.Sprintf("%d-%d", g, i)
				sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := pub.Send(sctx, Order{ID: id}, acemq.MessageID(id))
				scancel()
				if err != nil {
					failed.Add(1) // not confirmed: never counted as sent
					continue
				}
				mu.Lock()
				confirmed[id] = true
				mu.Unlock()
			}
		})
	}

	node := func() string {
		if tr, ok := mq.Transport().(*rabbitmq.Transport); ok {
			return tr.Node()
		}
		return ""
	}
	var killed *cluster.Node
	start := time.Now()
	for tick := range time.Tick(time.Second) {
		elapsed := tick.Sub(start).Round(time.Second)
		if kill && killed == nil && elapsed >= 5*time.Second {
			if killed = cluster.Attach(makeCluster).Node(node()); killed != nil {
				fmt.Println("killing", killed.Name, "(SIGKILL)")
				if err := killed.Kill(); err != nil {
					return err
				}
			}
		}
		mu.Lock()
		c, h := len(confirmed), len(handled)
		mu.Unlock()
		health := "healthy"
		if err := mq.Health(context.Background()); err != nil {
			health = err.Error()
		}
		fmt.Printf("%4s  confirmed %6d  handled %6d  failed %3d  on %s  (%s)\n", elapsed, c, h, failed.Load(), node(), health)
		if elapsed >= run {
			break
		}
	}
	stopSenders()
	if killed != nil {
		fmt.Println("starting", killed.Name, "again")
		if err := killed.Start(context.Background()); err != nil {
			return err
		}
	}

	// Every confirmed order must be handled; give the consumer time.
	deadline := time.Now().Add(30 * time.Second)
	var lost int
	for {
		mu.Lock()
		lost = 0
		for id := range confirmed {
			if !handled[id] {
				lost++
			}
		}
		c := len(confirmed)
		mu.Unlock()
		if lost == 0 || time.Now().After(deadline) {
			fmt.Printf("confirmed %d, failed %d, lost %d\n", c, failed.Load(), lost)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopRun()
	if err := <-ran; err != nil {
		return err
	}
	if lost > 0 {
		return fmt.Errorf("%d confirmed orders were not handled", lost)
	}
	return nil
}

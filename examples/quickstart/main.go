// Command quickstart tours acemq on the in-process broker: no RabbitMQ
// needed. Run it with
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/acemq/acemq/examples/internal/scenario"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := scenario.Run(ctx, "memory://quickstart", "orders", os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

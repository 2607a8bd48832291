// Command acemq is an operator's tool for the queues an acemq service
// uses: how full they are, what is waiting in a dead-letter or parking
// queue and why, moving messages back to work once their cause is fixed,
// and the blocked keys of an ordered queue.
//
//	acemq [-url URL] [-timeout D] stats QUEUE... [-delays D,D...]
//	acemq [-url URL] [-timeout D] peek QUEUE [-n N] [-body BYTES] [-v]
//	acemq [-url URL] [-timeout D] replay FROM TO [-limit N] [-type T] [-rate R] [-progress D] [-store SPEC]
//	acemq [-url URL] [-timeout D] keys list QUEUE
//	acemq [-url URL] [-timeout D] keys release [-rerun|-skip] QUEUE KEY
//	acemq [-url URL] [-timeout D] console [QUEUE...] [-addr 127.0.0.1:8080] [-token T] [-write] [-outbox-db URL]
//	acemq outbox dead [-db URL] [-table T] [-n N]
//	acemq outbox replay [-db URL] [-table T] (ID... | -all)
//	acemq blob sweep -store dir:PATH|postgres://...|sqlite:PATH [-table T]
//	acemq saga show -db URL NAME ID
//	acemq saga list -db URL NAME [-open] [-limit N]
//
// The broker is -url, else $ACEMQ_RABBITMQ_URL, else RabbitMQ's guest
// account on this machine; a memory:// broker lives in the process that
// made it, so the command refuses one. -timeout bounds connecting
// (default 10s). Exit status: 0 on success, 1 when something
// failed, 2 for a usage error. docs/operations.md has the details.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// The first SIGINT or SIGTERM ends ctx: stats and peek stop, and a
	// replay stops between two messages and prints its report. A second
	// signal kills the process as usual.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

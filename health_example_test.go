package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/acemq/acemq"
)

// probes are a service's readiness and liveness handlers. Readiness fails
// when the broker is unavailable, when a consumer is not running (never
// run, or its Run returned), faulted (its Run returned an error, or a
// Router has an invalid route) or stuck (a handler has held a delivery
// past StuckAfter): in each case a queue is not being consumed. A consumer
// paused on purpose, or by its kill switch while a database is down, is no
// reason to take the pod out of service. Liveness fails only once the
// Conn is closed.
func probes(mq *acemq.Conn) (ready, live http.HandlerFunc) {
	ready = func(w http.ResponseWriter, r *http.Request) {
		err := mq.Health(r.Context())
		switch {
		case errors.Is(err, acemq.ErrUnavailable), errors.Is(err, acemq.ErrNotRunning), errors.Is(err, acemq.ErrFaulted),
			errors.Is(err, acemq.ErrStuck), errors.Is(err, acemq.ErrClosed):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case err != nil: // paused or tripped: ready, and says so
			fmt.Fprintln(w, "ready; degraded:", err)
		default:
			fmt.Fprintln(w, "ready")
		}
	}
	live = func(w http.ResponseWriter, r *http.Request) {
		if errors.Is(mq.Health(r.Context()), acemq.ErrClosed) {
			http.Error(w, "closed", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "alive")
	}
	return ready, live
}

// stateOf is the state of the consumer of queue in mq's HealthReport.
func stateOf(mq *acemq.Conn, queue string) acemq.ConsumerState {
	for _, c := range mq.HealthReport(context.Background()).Consumers {
		if c.Queue == queue {
			return c.State
		}
	}
	return ""
}

// Every consumer is in HealthReport from its constructor until its Close
// or the Conn's, with its state: starting, consuming, paused (or tripped,
// by its kill switch), stopped once its Run returned, faulted when it
// cannot consume. A paused consumer shows in Health as ErrPaused and the
// readiness probe stays ready; one made and not run yet, a stopped one and
// a faulted one fail it, unless it is Nonessential. Close takes a consumer
// out for good.
func ExampleConn_HealthReport() {
	ctx := context.Background()
	mq, err := acemq.Connect(ctx, "memory://example-health")
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()
	handle := func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() }
	orders, err := acemq.NewConsumer(mq, "orders", handle)
	if err != nil {
		log.Fatal(err)
	}
	// A router the service can do without, whose type is routed twice by
	// mistake: faulted from the second Route on (which logs it at Error).
	audit := acemq.NewRouter(mq, "audit", acemq.Nonessential())
	acemq.Route(audit, handle)
	acemq.Route(audit, handle)
	show := func() {
		for _, c := range mq.HealthReport(ctx).Consumers {
			fmt.Println(" ", c.Kind, c.Queue, c.State, "nonessential:", c.Nonessential)
		}
	}
	ready, live := probes(mq)
	probe := func(h http.HandlerFunc, path string) int {
		w := httptest.NewRecorder()
		h(w, httptest.NewRequest("GET", path, nil))
		return w.Code
	}
	fmt.Println("made:")
	show()
	fmt.Println("not running:", errors.Is(mq.Health(ctx), acemq.ErrNotRunning), "ready", probe(ready, "/ready"))

	orders.Pause() // an operator's deliberate pause
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- orders.Run(runCtx) }()
	for !errors.Is(mq.Health(ctx), acemq.ErrPaused) { // until Run is running
		time.Sleep(time.Millisecond)
	}
	err = mq.Health(ctx)
	fmt.Println("paused:", errors.Is(err, acemq.ErrPaused), "faulted:", errors.Is(err, acemq.ErrFaulted),
		"unavailable:", errors.Is(err, acemq.ErrUnavailable))
	fmt.Println("ready", probe(ready, "/ready"))
	orders.Resume()
	for stateOf(mq, "orders") != acemq.StateConsuming { // until it subscribed again
		time.Sleep(time.Millisecond)
	}
	fmt.Println("resumed:")
	show()

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// An essential router with the same mistake takes the pod out.
	billing := acemq.NewRouter(mq, "billing")
	acemq.Route(billing, handle)
	acemq.Route(billing, handle)
	fmt.Println("stopped, and a faulted router:")
	show()
	err = mq.Health(ctx)
	fmt.Println("faulted:", errors.Is(err, acemq.ErrFaulted), "not running:", errors.Is(err, acemq.ErrNotRunning),
		"ready", probe(ready, "/ready"), "live", probe(live, "/live"))

	// The service is done with both: Close takes them off the Conn.
	if err := orders.Close(); err != nil {
		log.Fatal(err)
	}
	if err := billing.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("closed:")
	show()
	fmt.Println("healthy:", mq.Health(ctx) == nil, "ready", probe(ready, "/ready"))

	if err := mq.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("live after Close:", probe(live, "/live"))
	// Output:
	// made:
	//   router audit faulted nonessential: true
	//   consumer orders starting nonessential: false
	// not running: true ready 503
	// paused: true faulted: false unavailable: false
	// ready 200
	// resumed:
	//   router audit faulted nonessential: true
	//   consumer orders consuming nonessential: false
	// stopped, and a faulted router:
	//   router audit faulted nonessential: true
	//   router billing faulted nonessential: false
	//   consumer orders stopped nonessential: false
	// faulted: true not running: true ready 503 live 200
	// closed:
	//   router audit faulted nonessential: true
	// healthy: true ready 200
	// live after Close: 503
}

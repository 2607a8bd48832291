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
// only when the broker is unavailable: a consumer paused on purpose, or by
// its kill switch while a database is down, is no reason to take the pod
// out of service. Liveness fails only once the Conn is closed.
func probes(mq *acemq.Conn) (ready, live http.HandlerFunc) {
	ready = func(w http.ResponseWriter, r *http.Request) {
		err := mq.Health(r.Context())
		switch {
		case errors.Is(err, acemq.ErrUnavailable), errors.Is(err, acemq.ErrClosed):
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

// A paused consumer shows in Health as ErrPaused, and in HealthReport with
// its state; the readiness probe stays ready, the broker being fine.
func ExampleConn_HealthReport() {
	ctx := context.Background()
	mq, err := acemq.Connect(ctx, "memory://example-health")
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()
	orders, err := acemq.NewConsumer(mq, "orders", func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack {
		return acemq.Done()
	})
	if err != nil {
		log.Fatal(err)
	}
	orders.Pause() // an operator's deliberate pause
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- orders.Run(runCtx) }()
	for !errors.Is(mq.Health(ctx), acemq.ErrPaused) { // until Run is running
		time.Sleep(time.Millisecond)
	}

	err = mq.Health(ctx)
	fmt.Println("paused:", errors.Is(err, acemq.ErrPaused), "tripped:", errors.Is(err, acemq.ErrTripped),
		"unavailable:", errors.Is(err, acemq.ErrUnavailable))
	report := mq.HealthReport(ctx)
	fmt.Println("connection:", report.Connection)
	for _, c := range report.Consumers {
		fmt.Println(c.Kind, c.Queue, c.State)
	}
	ready, live := probes(mq)
	w := httptest.NewRecorder()
	ready(w, httptest.NewRequest("GET", "/ready", nil))
	fmt.Println("ready", w.Code)
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	if err := mq.Close(); err != nil {
		log.Fatal(err)
	}
	w = httptest.NewRecorder()
	live(w, httptest.NewRequest("GET", "/live", nil))
	fmt.Println("live after Close:", w.Code)
	// Output:
	// paused: true tripped: false unavailable: false
	// connection: <nil>
	// consumer orders paused
	// ready 200
	// live after Close: 503
}

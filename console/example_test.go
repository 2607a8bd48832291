package console_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/console"
)

// A service mounts the console on its own mux, under /console/, read-only
// and for loopback clients only (no Auth given).
func ExampleHandler() {
	ctx := context.Background()
	conn, err := acemq.Connect(ctx, "memory://example-console", acemq.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", console.Handler(conn, console.Queues("orders"))))

	srv := httptest.NewServer(mux) // in a service: http.ListenAndServe("127.0.0.1:8080", mux)
	defer srv.Close()
	res, err := http.Get(srv.URL + "/console/api/overview")
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	fmt.Println(res.Status, res.Header.Get("Content-Type"))
	// Output: 200 OK application/json
}

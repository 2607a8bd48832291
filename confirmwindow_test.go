package acemq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport/rabbitmq"
)

func TestWithConfirmWindowRefusesBelowOne(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		n    int
	}{
		{name: "zero", n: 0},
		{name: "negative", n: -5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := acemq.Connect(context.Background(), "memory://", acemq.WithConfirmWindow(tc.n))
			if err == nil {
				_ = c.Close()
				t.Fatal("Connect succeeded")
			}
			if !strings.Contains(err.Error(), "WithConfirmWindow") {
				t.Errorf("Connect error = %q; want it to name WithConfirmWindow", err)
			}
		})
	}
}

// TestWithConfirmWindowReachesTheTransport checks the option sets the
// RabbitMQ transport's window, and that publishing works at its edge (1:
// one publish outstanding at a time).
func TestWithConfirmWindowReachesTheTransport(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	for _, tc := range []struct {
		name string
		opts []acemq.ConnOption
		want int
	}{
		{name: "default", want: rabbitmq.DefaultConfirmWindow},
		{name: "one", opts: []acemq.ConnOption{acemq.WithConfirmWindow(1)}, want: 1},
		{name: "seven", opts: []acemq.ConnOption{acemq.WithConfirmWindow(7)}, want: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := acemq.Connect(ctx, url, append(tc.opts, acemq.WithLogger(quiet))...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tr, ok := c.Transport().(*rabbitmq.Transport)
			if !ok {
				t.Fatalf("the transport is a %T", c.Transport())
			}
			if got := tr.ConfirmWindow(); got != tc.want {
				t.Fatalf("ConfirmWindow() = %d; want %d", got, tc.want)
			}
			q := acemqtest.QueueName(t, "window")
			if err := c.Declare(ctx, acemq.Queue{Name: q}); err != nil {
				t.Fatal(err)
			}
			acemqtest.DeleteQueuesAfter(t, url, q)
			for _, r := range acemq.NewPublisher[string](c, "", q).SendAll(ctx, make([]string, 40)) {
				if r.Err != nil {
					t.Fatalf("SendAll: %v", r.Err)
				}
			}
			if n := tr.Outstanding(); n != 0 {
				t.Errorf("Outstanding() after SendAll = %d; want 0", n)
			}
		})
	}
}

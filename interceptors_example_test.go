package acemq_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/acemq/acemq"
)

// The interceptors of docs/interceptors.md, as the page shows them.

// stampTenant puts the tenant on every message the Conn publishes.
func stampTenant(tenant string) acemq.PublishInterceptor {
	return func(_ context.Context, c *acemq.PublishContext) error {
		c.SetHeader("x-tenant", tenant)
		return nil
	}
}

// refuseOtherTenants dead-letters a delivery of another tenant before its
// body is decoded.
func refuseOtherTenants(tenant string) acemq.ConsumeInterceptor {
	return func(_ context.Context, c *acemq.ConsumeContext) error {
		if got := c.Envelope.Headers["x-tenant"]; got != tenant {
			return fmt.Errorf("tenant %v is not served here", got)
		}
		return nil
	}
}

// quarantineLargeOrders sends an order over limit to another queue.
func quarantineLargeOrders(limit int64) acemq.PublishInterceptor {
	return func(_ context.Context, c *acemq.PublishContext) error {
		if o, ok := c.Payload.(OrderPlaced); ok && o.TotalCents > limit {
			c.RoutingKey = "orders.review"
			c.SetHeader("x-quarantined", "over the limit")
		}
		return nil
	}
}

// connectTenant is the page's first Connect: a tenant stamped on the way
// out and checked on the way in.
func connectTenant(ctx context.Context, url string) (*acemq.Conn, error) {
	mq, err := acemq.Connect(ctx, url,
		acemq.WithPublishInterceptor(stampTenant("alpha")),
		acemq.WithConsumeInterceptor(refuseOtherTenants("alpha")))
	return mq, err
}

// connectReview adds the page's other interceptors: large orders sent for
// review, and the time each delivery arrived stamped for its handler.
func connectReview(ctx context.Context, url string) (*acemq.Conn, error) {
	mq, err := acemq.Connect(ctx, url,
		acemq.WithPublishInterceptor(stampTenant("alpha")),
		acemq.WithPublishInterceptor(quarantineLargeOrders(1_000_000)),
		acemq.WithConsumeInterceptor(refuseOtherTenants("alpha")),
		acemq.WithConsumeInterceptor(func(_ context.Context, c *acemq.ConsumeContext) error {
			c.Envelope.Headers["x-received-at"] = time.Now().UTC().Format(time.RFC3339)
			return nil
		}))
	return mq, err
}

// The interceptors of docs/interceptors.md on two Conns of one broker: a
// tenant stamped on the way out and checked on the way in, a large order
// sent for review, and the time of arrival stamped for the handler.
func Example_interceptors() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const url = "memory://example-interceptors-page"
	tenant, err := connectTenant(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer tenant.Close()
	mq, err := connectReview(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer mq.Close()
	seen := make(chan string, 2)
	handle := func(queue string) acemq.Handler[OrderPlaced] {
		return func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			_, stamped := m.Envelope.Headers["x-received-at"]
			seen <- fmt.Sprintf("%s: %s, tenant %v, quarantined %v, arrival stamped %v", queue, m.Payload.OrderID,
				m.Envelope.Headers["x-tenant"], m.Envelope.Headers["x-quarantined"] != nil, stamped)
			return acemq.Done()
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, q := range []string{"orders", "orders.review"} {
		cons, err := acemq.NewConsumer(mq, q, handle(q))
		if err != nil {
			log.Fatal(err)
		}
		go func() { _ = cons.Run(runCtx) }()
	}
	for _, send := range []struct {
		from *acemq.Conn
		o    OrderPlaced
	}{{tenant, OrderPlaced{OrderID: "A-1", TotalCents: 1999}}, {mq, OrderPlaced{OrderID: "A-2", TotalCents: 2_000_000}}} {
		if err := acemq.NewPublisher[OrderPlaced](send.from, "", "orders").Send(ctx, send.o); err != nil {
			log.Fatal(err)
		}
		fmt.Println(<-seen)
	}
	// Output:
	// orders: A-1, tenant alpha, quarantined false, arrival stamped true
	// orders.review: A-2, tenant alpha, quarantined true, arrival stamped true
}

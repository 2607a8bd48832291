// Package scenario is the tour the quickstart and rabbitmq examples run: a
// tenant stamped on the way out, another tenant refused on the way in, a
// handler that fails twice before it succeeds, a rejection and a body that
// does not decode, each settlement printed as it happens.
package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/acemq/acemq"
)

// OrderPlaced is the message the tour sends.
type OrderPlaced struct {
	OrderID    string `json:"orderId"`
	TotalCents int64  `json:"totalCents"`
}

// Policy is the tour's retry policy: short tiers, so it finishes quickly.
var Policy = acemq.RetryPolicy{MaxAttempts: 5, Delays: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}}

// stampTenant is a publish interceptor: every message out of this Conn
// carries the tenant it was published for.
func stampTenant(tenant string) acemq.PublishInterceptor {
	return func(_ context.Context, c *acemq.PublishContext) error {
		c.SetHeader("x-tenant", tenant)
		return nil
	}
}

// refuseOtherTenants is a consume interceptor: a message of another tenant
// is dead-lettered before anything decodes it.
func refuseOtherTenants(mine string) acemq.ConsumeInterceptor {
	return func(_ context.Context, c *acemq.ConsumeContext) error {
		if tenant, _ := c.Envelope.Headers["x-tenant"].(string); tenant != mine {
			return fmt.Errorf("tenant %q is not served by this process", tenant)
		}
		return nil
	}
}

// Run plays the tour against the broker at url, writing to out, and
// returns once every message has settled. queue names the queue it uses
// (and its .dlq, .parked and retry tiers).
func Run(ctx context.Context, url, queue string, out io.Writer) error {
	const expected = 7 // 2 retries + 1 ack for the flaky order, 1 ack, 1 refusal, 1 rejection, 1 parked
	var (
		mu      sync.Mutex
		counts  = map[acemq.Outcome]int{}
		settled = make(chan struct{}, expected)
	)
	report := acemq.OnSettled(func(_ context.Context, s acemq.Settlement) {
		mu.Lock()
		counts[s.Outcome]++
		mu.Unlock()
		line := fmt.Sprintf("settled  %-13s attempt %d  %-8s", s.Outcome, s.Attempt, s.Envelope.Headers["x-order"])
		if s.Reason != "" {
			line += "  reason: " + s.Reason
		}
		fmt.Fprintln(out, strings.TrimRight(line, " "))
		settled <- struct{}{}
	})

	// The service: serves tenant alpha and stamps it on what it publishes.
	alpha, err := acemq.Connect(ctx, url,
		acemq.WithPublishInterceptor(stampTenant("alpha")),
		acemq.WithConsumeInterceptor(refuseOtherTenants("alpha")),
		acemq.WithRetryPolicy(Policy), report)
	if err != nil {
		return err
	}
	defer alpha.Close()
	// Another service on the same broker, publishing for tenant beta.
	beta, err := acemq.Connect(ctx, url, acemq.WithPublishInterceptor(stampTenant("beta")))
	if err != nil {
		return err
	}
	defer beta.Close()

	var flakyFailures int
	handle := func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		switch m.Payload.OrderID {
		case "flaky":
			if m.Envelope.Attempt <= 2 {
				flakyFailures++
				return acemq.Retry(fmt.Errorf("the warehouse is busy (failure %d)", flakyFailures))
			}
		case "bad-customer":
			return acemq.Reject(errors.New("customer 42 does not exist"))
		}
		return acemq.Done()
	}
	orders, err := acemq.NewConsumer(alpha, queue, handle)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- orders.Run(runCtx) }()
	// wait stops the consumer and waits for Run, once, on every way out,
	// so nothing runs on after the Conns close.
	var (
		waited bool
		ranErr error
	)
	wait := func() error {
		if !waited {
			stop()
			ranErr, waited = <-runErr, true
		}
		return ranErr
	}
	defer wait()

	pub := acemq.NewPublisher[OrderPlaced](alpha, "", queue)
	send := func(p *acemq.Publisher[OrderPlaced], id string, cents int64) error {
		err := p.Send(ctx, OrderPlaced{OrderID: id, TotalCents: cents}, acemq.Header("x-order", id))
		fmt.Fprintf(out, "sent     %-13s confirmed=%v\n", id, err == nil)
		return err
	}
	for _, o := range []struct {
		p     *acemq.Publisher[OrderPlaced]
		id    string
		cents int64
	}{
		{pub, "ok", 1999},
		{pub, "flaky", 4250},
		{pub, "bad-customer", 100},
		{acemq.NewPublisher[OrderPlaced](beta, "", queue), "beta-order", 700},
	} {
		if err := send(o.p, o.id, o.cents); err != nil {
			return err
		}
	}
	garbage := acemq.NewPublisher[acemq.Raw](alpha, "", queue, acemq.ContentType("application/json"))
	if err := garbage.Send(ctx, acemq.Raw("{this is not json"), acemq.Header("x-order", "garbage")); err != nil {
		return err
	}
	fmt.Fprintf(out, "sent     %-13s confirmed=true\n", "garbage")

	timeout := time.After(8 * time.Second)
	for range expected {
		select {
		case <-settled:
		case <-timeout:
			return errors.New("not every message settled within 8s")
		}
	}
	if err := wait(); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(out, "\nsummary: %d acked, %d retried, %d rejected, %d dead_lettered, %d parked\n",
		counts[acemq.OutcomeAcked], counts[acemq.OutcomeRetried], counts[acemq.OutcomeRejected],
		counts[acemq.OutcomeDeadLettered], counts[acemq.OutcomeParked])
	fmt.Fprintf(out, "%s.dlq holds the rejected and the refused message; %s.parked holds the one that would not decode\n", queue, queue)
	return nil
}

// Command delayretry measures RabbitMQ 4.3's delayed retry for quorum
// queues (the queue arguments x-delayed-retry-type, -min and -max) against
// acemq's retry ladder through the delay topology (RetryPolicy with
// ThroughDelay), on one node, for SPEC §20's decision (docs/scheduling.md,
// "The broker's delayed retry", has the numbers and the decision).
//
//	ACEMQ_RABBITMQ_URL=amqp://guest:guest@127.0.0.1:5682/ go run ./tools/delayretry
//
// It runs on a RabbitMQ 4.3 node of its own (scripts/rabbitmq4.sh run),
// never on a shared broker: every queue it declares has a unique name and
// is deleted at the end, but the ladder declares the vhost's delay
// topology, which stays (tools/leftovers -delete removes it).
//
// Four experiments, each over -n messages:
//
//   - broker, nack: a quorum queue with delayed retry (type all, min 1s,
//     max 4s, x-delivery-limit 2); each message is nacked with requeue
//     four times, then acked. Prints the observed waits per attempt and
//     the x-delivery-count and x-acquired-count the consumer saw.
//   - broker, failed: the same queue, x-delivery-limit 3; each round takes
//     every message on a channel of its own and closes it without an ack
//     (a failed delivery, as when a consumer dies), until the messages
//     are dead-lettered. Prints the waits and what .dlq holds.
//   - ladder: acemq consumers on a quorum queue with RetryPolicy{4
//     attempts, 1s 2s 4s, ThroughDelay}; every attempt fails. Prints
//     lateness per attempt, Envelope.Attempt and the .dlq reason.
//   - throughput: -tn messages failing once and handled on the second
//     attempt after 1s, by the broker's delayed retry and by the ladder.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq"
)

func main() {
	n := flag.Int("n", 200, "messages per accuracy experiment")
	tn := flag.Int("tn", 2000, "messages in the throughput experiment")
	only := flag.String("run", "nack,failed,ladder,tput", "the experiments to run, comma-separated")
	flag.Parse()
	url := os.Getenv("ACEMQ_RABBITMQ_URL")
	if url == "" {
		fmt.Fprintln(os.Stderr, "delayretry: set ACEMQ_RABBITMQ_URL to a RabbitMQ 4.3 node of its own")
		os.Exit(2)
	}
	if err := run(url, *n, *tn, strings.Split(*only, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "delayretry:", err)
		os.Exit(1)
	}
}

func run(url string, n, tn int, only []string) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Printf("RabbitMQ %v\n", conn.Properties["version"])
	tag := fmt.Sprintf("%x", rand.Uint64()&0xffffff)
	var errs []error
	if slices.Contains(only, "nack") {
		errs = append(errs, brokerNack(conn, "delayretry.nack."+tag, n))
	}
	if slices.Contains(only, "failed") {
		errs = append(errs, brokerFailed(conn, "delayretry.failed."+tag, n))
	}
	if slices.Contains(only, "ladder") {
		errs = append(errs, ladder(url, "delayretry.ladder."+tag, n))
	}
	if slices.Contains(only, "tput") {
		errs = append(errs, throughput(conn, url, "delayretry.tput."+tag, tn))
	}
	return errors.Join(errs...)
}

// declare declares a quorum queue with the broker's delayed retry and
// dead-lettering to name.dlq, and that queue; cleanup deletes both.
func declare(conn *amqp.Connection, name, typ string, minMS, maxMS, limit int) (cleanup func(), err error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	cleanup = func() {
		if c, err := conn.Channel(); err == nil {
			_, _ = c.QueueDelete(name, false, false, false)
			_, _ = c.QueueDelete(name+".dlq", false, false, false)
			_ = c.Close()
		}
	}
	if _, err := ch.QueueDeclare(name+".dlq", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return cleanup, err
	}
	_, err = ch.QueueDeclare(name, true, false, false, false, amqp.Table{
		"x-queue-type":              "quorum",
		"x-delayed-retry-type":      typ,
		"x-delayed-retry-min":       int64(minMS),
		"x-delayed-retry-max":       int64(maxMS),
		"x-delivery-limit":          int64(limit),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": name + ".dlq",
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
	})
	return cleanup, err
}

// publish sends n messages with IDs 0..n-1 to queue, confirmed.
func publish(conn *amqp.Connection, queue string, n int) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	for i := range n {
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false,
			amqp.Publishing{MessageId: fmt.Sprint(i), DeliveryMode: amqp.Persistent, Body: []byte("x")})
		if err != nil {
			return err
		}
		if i == n-1 {
			if ok, err := c.WaitContext(context.Background()); err != nil || !ok {
				return fmt.Errorf("publish not confirmed: %v", err)
			}
		}
	}
	return nil
}

// header renders a delivery header, "-" when absent.
func header(h amqp.Table, k string) string {
	if v, ok := h[k]; ok {
		return fmt.Sprint(v)
	}
	return "-"
}

// brokerNack: delayed retry of nacked messages (AMQP 0.9.1 basic.nack with
// requeue, what a handler's failure is).
func brokerNack(conn *amqp.Connection, q string, n int) error {
	const rounds = 4 // nacks per message: past the delivery limit of 2
	cleanup, err := declare(conn, q, "all", 1000, 4000, 2)
	defer cleanup()
	if err != nil {
		return fmt.Errorf("broker nack: %w", err)
	}
	if err := publish(conn, q, n); err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Qos(n, 0, false); err != nil {
		return err
	}
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	nacked := map[string]time.Time{}
	seen := map[string]int{}
	waits := make([][]time.Duration, rounds+1)
	counts := make([]map[string]int, rounds+1)
	for done := 0; done < n; {
		var d amqp.Delivery
		select {
		case d = <-ds:
		case <-time.After(30 * time.Second):
			return fmt.Errorf("broker nack: %d of %d messages finished, then nothing for 30s", done, n)
		}
		now := time.Now()
		k := seen[d.MessageId]
		seen[d.MessageId]++
		if counts[k] == nil {
			counts[k] = map[string]int{}
		}
		counts[k][fmt.Sprintf("x-delivery-count=%s x-acquired-count=%s redelivered=%v",
			header(d.Headers, "x-delivery-count"), header(d.Headers, "x-acquired-count"), d.Redelivered)]++
		if k > 0 {
			waits[k] = append(waits[k], now.Sub(nacked[d.MessageId]))
		}
		if k < rounds {
			nacked[d.MessageId] = time.Now()
			if err := d.Nack(false, true); err != nil {
				return err
			}
			continue
		}
		if err := d.Ack(false); err != nil {
			return err
		}
		done++
	}
	dlq, err := ch.QueueDeclarePassive(q+".dlq", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	if err != nil {
		return err
	}
	fmt.Printf("\nbroker delayed retry, basic.nack requeue (type all, min 1s, max 4s, x-delivery-limit 2), %d messages x %d nacks:\n", n, rounds)
	for k := range rounds + 1 {
		fmt.Printf("  delivery %d: %s", k+1, summary(counts[k]))
		if k > 0 {
			fmt.Printf("; wait after the nack %s", stats(waits[k]))
		}
		fmt.Println()
	}
	fmt.Printf("  in .dlq after %d nacks each: %d\n", rounds, dlq.Messages)
	return nil
}

// brokerFailed: delayed retry of failed deliveries (the channel closed
// with the messages unacked).
func brokerFailed(conn *amqp.Connection, q string, n int) error {
	const limit = 3
	cleanup, err := declare(conn, q, "all", 1000, 4000, limit)
	defer cleanup()
	if err != nil {
		return fmt.Errorf("broker failed: %w", err)
	}
	if err := publish(conn, q, n); err != nil {
		return err
	}
	fmt.Printf("\nbroker delayed retry, failed deliveries (channel closed unacked; type all, min 1s, max 4s, x-delivery-limit %d), %d messages:\n", limit, n)
	var closed time.Time
	for round := 1; ; round++ {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		if err := ch.Qos(n, 0, false); err != nil {
			return err
		}
		ds, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			return err
		}
		var waits []time.Duration
		counts := map[string]int{}
	take:
		for len(waits) < n {
			select {
			case d := <-ds:
				waits = append(waits, time.Since(closed))
				counts[fmt.Sprintf("x-delivery-count=%s x-acquired-count=%s", header(d.Headers, "x-delivery-count"), header(d.Headers, "x-acquired-count"))]++
			case <-time.After(10 * time.Second):
				break take
			}
		}
		_ = ch.Close()
		closed = time.Now()
		if len(waits) == 0 {
			break
		}
		fmt.Printf("  delivery %d: %d messages, %s", round, len(waits), summary(counts))
		if round > 1 {
			fmt.Printf("; wait after the close %s", stats(waits))
		}
		fmt.Println()
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	reasons := map[string]int{}
	got := 0
	for {
		d, ok, err := ch.Get(q+".dlq", false)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		got++
		reason := "-"
		if xd, ok := d.Headers["x-death"].([]any); ok && len(xd) > 0 {
			if t, ok := xd[0].(amqp.Table); ok {
				reason = fmt.Sprintf("x-death[0] reason=%v count=%v", t["reason"], t["count"])
			}
		}
		reasons[fmt.Sprintf("%s x-first-death-reason=%s x-delivery-count=%s other headers=%v", reason,
			header(d.Headers, "x-first-death-reason"), header(d.Headers, "x-delivery-count"), otherHeaders(d.Headers))]++
		_ = d.Ack(false)
	}
	fmt.Printf("  in .dlq: %d: %s\n", got, summary(reasons))
	return nil
}

// otherHeaders lists the header names besides the broker's dead-letter ones.
func otherHeaders(h amqp.Table) []string {
	var names []string
	for k := range h {
		switch k {
		case "x-death", "x-first-death-reason", "x-first-death-queue", "x-first-death-exchange",
			"x-last-death-reason", "x-last-death-queue", "x-last-death-exchange", "x-delivery-count":
		default:
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

// payload is what the ladder's messages carry.
type payload struct{ N int }

// ladder: acemq's retry ladder through the delay topology, every attempt failing.
func ladder(url, q string, n int) error {
	delays := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
	policy := acemq.RetryPolicy{MaxAttempts: len(delays) + 1, Delays: delays, ThroughDelay: true}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := acemq.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close()
	tr := c.Transport()
	defer func() {
		for _, name := range []string{q, acemq.DeadLetterQueue(q), acemq.ParkingQueue(q)} {
			_ = tr.DeleteQueue(context.Background(), name)
		}
	}()
	type arrival struct {
		attempt int
		at      time.Time
	}
	var mu sync.Mutex
	arrivals := map[string][]arrival{}
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[payload]) acemq.Ack {
		mu.Lock()
		arrivals[m.Envelope.ID] = append(arrivals[m.Envelope.ID], arrival{m.Envelope.Attempt, time.Now()})
		mu.Unlock()
		return acemq.Retry(errors.New("measured failure"))
	}, acemq.WithConsumerRetry(policy), acemq.Quorum(), acemq.Prefetch(256))
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = cons.Run(runCtx) }()
	pub := acemq.NewPublisher[payload](c, "", q)
	vs := make([]payload, n)
	for i := range vs {
		vs[i].N = i
	}
	for _, r := range pub.SendAll(ctx, vs) {
		if r.Err != nil {
			return r.Err
		}
	}
	dlq := acemq.DeadLetterQueue(q)
	for {
		info, err := tr.Inspect(ctx, dlq)
		if err != nil {
			return err
		}
		if info.Messages >= n {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("ladder: %d of %d messages in %s before the deadline", info.Messages, n, dlq)
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	fmt.Printf("\nacemq ladder through the delay topology (quorum queue, %d attempts, delays %v), %d messages:\n", policy.MaxAttempts, delays, n)
	mu.Lock()
	late := make([][]time.Duration, len(delays))
	attempts := make([]map[string]int, policy.MaxAttempts)
	for _, as := range arrivals {
		for i, a := range as {
			if attempts[i] == nil {
				attempts[i] = map[string]int{}
			}
			attempts[i][fmt.Sprintf("Envelope.Attempt=%d", a.attempt)]++
			if i > 0 {
				late[i-1] = append(late[i-1], a.at.Sub(as[i-1].at)-delays[i-1])
			}
		}
	}
	mu.Unlock()
	var all []time.Duration
	for i, a := range attempts {
		fmt.Printf("  delivery %d: %s", i+1, summary(a))
		if i > 0 {
			fmt.Printf("; lateness beyond %v %s", delays[i-1], stats(late[i-1]))
			all = append(all, late[i-1]...)
		}
		fmt.Println()
	}
	fmt.Printf("  lateness, all retries: %s\n", stats(all))
	reasons := map[string]int{}
	for range n {
		d, ok, err := tr.Get(ctx, dlq)
		if err != nil || !ok {
			return fmt.Errorf("ladder: reading %s: %v", dlq, err)
		}
		env, err := acemq.EnvelopeOf(d.Message)
		if err != nil {
			return err
		}
		reasons[fmt.Sprintf("Attempt=%d Error=%q", env.Attempt, env.Error)]++
		_ = d.Ack()
	}
	fmt.Printf("  in .dlq: %s\n", summary(reasons))
	return nil
}

// throughput: tn messages failing once and handled after a 1s wait, by
// the broker's delayed retry and by the ladder; the time from the first
// delivery to the last.
func throughput(conn *amqp.Connection, url, q string, tn int) error {
	fmt.Printf("\nthroughput: %d messages, failing once, handled on attempt 2 after 1s (first delivery to last handled):\n", tn)
	// The broker: consumed after all are published.
	bq := q + ".broker"
	cleanup, err := declare(conn, bq, "all", 1000, 1000, 5)
	defer cleanup()
	if err != nil {
		return err
	}
	if err := publish(conn, bq, tn); err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Qos(256, 0, false); err != nil {
		return err
	}
	ds, err := ch.Consume(bq, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	var first, firstDone time.Time
	for done := 0; done < tn; {
		var d amqp.Delivery
		select {
		case d = <-ds:
		case <-time.After(30 * time.Second):
			return fmt.Errorf("throughput, broker: %d of %d handled, then nothing for 30s", done, tn)
		}
		if first.IsZero() {
			first = time.Now()
		}
		if !d.Redelivered {
			_ = d.Nack(false, true)
			continue
		}
		if firstDone.IsZero() {
			firstDone = time.Now()
		}
		_ = d.Ack(false)
		done++
	}
	span := time.Since(first)
	fmt.Printf("  broker delayed retry: %v, %.0f messages/s (first handled %v after the first delivery)\n",
		span.Round(time.Millisecond), float64(tn)/span.Seconds(), firstDone.Sub(first).Round(time.Millisecond))

	// The ladder: the same, through acemq.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := acemq.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close()
	lq := q + ".ladder"
	defer func() {
		for _, name := range []string{lq, acemq.DeadLetterQueue(lq), acemq.ParkingQueue(lq)} {
			_ = c.Transport().DeleteQueue(context.Background(), name)
		}
	}()
	var mu sync.Mutex
	var lfirst, lfirstDone, llast, lastFirst time.Time
	handled := make(chan struct{}, tn)
	cons, err := acemq.NewConsumer(c, lq, func(_ context.Context, m *acemq.Message[payload]) acemq.Ack {
		mu.Lock()
		if lfirst.IsZero() {
			lfirst = time.Now()
		}
		mu.Unlock()
		if m.Envelope.Attempt == 1 {
			mu.Lock()
			lastFirst = time.Now()
			mu.Unlock()
			return acemq.Retry(errors.New("once"))
		}
		mu.Lock()
		llast = time.Now()
		if lfirstDone.IsZero() {
			lfirstDone = llast
		}
		mu.Unlock()
		handled <- struct{}{}
		return acemq.Done()
	}, acemq.WithConsumerRetry(acemq.RetryPolicy{MaxAttempts: 2, Delays: []time.Duration{time.Second}, ThroughDelay: true}),
		acemq.Quorum(), acemq.Prefetch(256))
	if err != nil {
		return err
	}
	vs := make([]payload, tn)
	for _, r := range acemq.NewPublisher[payload](c, "", lq).SendAll(ctx, vs) {
		if r.Err != nil {
			return r.Err
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = cons.Run(runCtx) }()
	for i := range tn {
		select {
		case <-handled:
		case <-ctx.Done():
			return fmt.Errorf("throughput, ladder: %d of %d handled before the deadline", i, tn)
		}
	}
	stop()
	mu.Lock()
	span = llast.Sub(lfirst)
	mu.Unlock()
	fmt.Printf("  acemq ladder (ThroughDelay): %v, %.0f messages/s (first handled %v after the first delivery; first attempts over %v)\n",
		span.Round(time.Millisecond), float64(tn)/span.Seconds(), lfirstDone.Sub(lfirst).Round(time.Millisecond), lastFirst.Sub(lfirst).Round(time.Millisecond))
	return nil
}

// summary renders counts of strings, most frequent first.
func summary(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d× %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

// stats renders p50, p99, max and min of ds.
func stats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "(none)"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration {
		return s[min(len(s)-1, int(p*float64(len(s))))].Round(time.Millisecond)
	}
	return fmt.Sprintf("p50 %v p99 %v max %v (min %v)", q(0.50), q(0.99), s[len(s)-1].Round(time.Millisecond), s[0].Round(time.Millisecond))
}

package clustertest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/tools/cluster"
)

// firehose records, with RabbitMQ's firehose tracer, every publish a node
// receives (with the queues it routed to) and every delivery it makes,
// into a queue of its own, so that what happened to a message the ordered
// test misses can be told: published or not, on which connection and
// channel, routed where, delivered or never.
type firehose struct {
	cl   *cluster.Cluster
	q    string
	home *cluster.Node // where the queue lives: a classic queue, on a node that is not killed
}

// startFirehose turns the tracer on on every node and declares the queue
// that keeps what it reports, a classic queue on a node other than avoid
// (cheaper than a quorum queue, so the tracer slows the broker less). It
// removes both when the test ends.
func startFirehose(t *testing.T, cl *cluster.Cluster, q string, avoid *cluster.Node) *firehose {
	f := &firehose{cl: cl, q: q + ".trace"}
	for _, n := range cl.Nodes {
		if n != avoid {
			f.home = n
			break
		}
	}
	err := f.with(func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(f.q, false, false, false, false, amqp.Table{"x-queue-type": "classic"}); err != nil {
			return err
		}
		return ch.QueueBind(f.q, "#", "amq.rabbitmq.trace", false, nil)
	})
	if err != nil {
		t.Fatalf("firehose: %v", err)
	}
	for _, n := range cl.Nodes {
		if out, err := n.Ctl(ctxT(t, time.Minute), "trace_on"); err != nil {
			t.Fatalf("firehose: trace_on on %s: %v %s", n.Name, err, out)
		}
	}
	t.Cleanup(func() {
		for _, n := range cl.Nodes {
			if n.Running() {
				_, _ = n.Ctl(ctxT(t, time.Minute), "trace_off")
			}
		}
		_ = f.with(func(ch *amqp.Channel) error { _, err := ch.QueueDelete(f.q, false, false, false); return err })
	})
	return f
}

// with runs fn on a channel of a connection to the queue's node.
func (f *firehose) with(fn func(*amqp.Channel) error) error {
	conn, err := amqp.Dial(f.home.URL())
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return fn(ch)
}

// explain reads everything the tracer recorded and logs, for each message
// ID in ids, what happened to it: each publish and delivery with the node,
// the connection, the queues it was routed to and whether it was
// redelivered.
//
// For each message of context it sums up, per queue the message was routed
// to, how many were published on each connection and channel and how many
// were delivered, marking the missing ones.
func (f *firehose) explain(t *testing.T, ids, context []string) {
	want := map[string][]string{}
	for _, id := range ids {
		want[id] = nil
	}
	for _, id := range context {
		want[id] = nil
	}
	missing := map[string]bool{}
	for _, id := range ids {
		missing[id] = true
	}
	total := 0
	err := f.with(func(ch *amqp.Channel) error {
		if err := ch.Qos(2000, 0, false); err != nil {
			return err
		}
		ds, err := ch.Consume(f.q, "", true, false, false, false, nil)
		if err != nil {
			return err
		}
		for {
			select {
			case d, ok := <-ds:
				if !ok {
					return fmt.Errorf("the trace consumer was closed")
				}
				total++
				props, _ := d.Headers["properties"].(amqp.Table)
				id, _ := props["message_id"].(string)
				if _, ok := want[id]; !ok {
					continue
				}
				want[id] = append(want[id], describeTrace(d))
			case <-time.After(3 * time.Second):
				return nil
			}
		}
	})
	if err != nil {
		t.Logf("firehose: reading %s: %v", f.q, err)
	}
	summary := map[string]int{}
	for _, id := range context {
		routed, via, delivered := "?", "", false
		for _, e := range want[id] {
			if strings.HasPrefix(e, "publish") {
				via += " " + field(e, "connection") + "#" + field(e, "channel")
				if r := field(e, "routed_queues"); r != "" {
					routed = r
				}
			}
			delivered = delivered || strings.HasPrefix(e, "deliver")
		}
		summary[fmt.Sprintf("%s published via%s delivered=%v missing=%v", routed, via, delivered, missing[id])]++
	}
	lines := make([]string, 0, len(summary))
	for l, n := range summary {
		lines = append(lines, fmt.Sprintf("%3d× %s", n, l))
	}
	sort.Strings(lines)
	for _, l := range lines {
		t.Logf("firehose: round: %s", l)
	}
	never := 0
	sorted := slices.Sorted(slices.Values(ids))
	for i, id := range sorted {
		delivered := false
		for _, e := range want[id] {
			delivered = delivered || strings.HasPrefix(e, "deliver")
		}
		if !delivered {
			never++
		}
		if i < 40 {
			t.Logf("firehose: %s: %v", id, want[id])
		}
	}
	t.Logf("firehose: %d trace events read; of %d missing messages %d were never delivered to any consumer", total, len(ids), never)
}

// field is the value of name=... in a description by describeTrace.
func field(desc, name string) string {
	_, v, ok := strings.Cut(desc, " "+name+"=")
	if !ok {
		return ""
	}
	if strings.HasPrefix(v, "[") {
		v, _, _ = strings.Cut(v[1:], "]")
		return v
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}

func describeTrace(d amqp.Delivery) string {
	var b strings.Builder
	b.WriteString(d.RoutingKey[:strings.IndexByte(d.RoutingKey+".", '.')])
	for _, h := range []string{"node", "connection", "channel", "routed_queues", "redelivered", "routing_keys"} {
		if v, ok := d.Headers[h]; ok {
			fmt.Fprintf(&b, " %s=%v", h, v)
		}
	}
	if !d.Timestamp.IsZero() {
		fmt.Fprintf(&b, " at=%s", d.Timestamp.Format("15:04:05.000"))
	}
	return b.String()
}

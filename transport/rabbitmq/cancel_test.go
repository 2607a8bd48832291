package rabbitmq_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// TestConsumerResumesAfterItsQueueIsDeleted: a queue deleted under its
// consumer by someone else makes the broker cancel the consumer
// (basic.cancel). The transport declares the queue and its binding again,
// as it would after a reconnection, and the consumer takes what is
// published to it afterwards; Health is nil again.
func TestConsumerResumesAfterItsQueueIsDeleted(t *testing.T) {
	url := brokerURL(t)
	tr := dial(t, url, rabbitmq.Config{})
	q := acemqtest.QueueName(t, "cancelled")
	key := q + ".key"
	if err := tr.Declare(ctxT(t), transport.Queue{Name: q}, transport.Binding{Exchange: "amq.direct", Key: key, Queue: q}); err != nil {
		t.Fatalf("Declare: %v", err)
	}
	acemqtest.DeleteQueuesAfter(t, url, q)
	c := consume(t, tr, q, 10)
	send := func(id string) {
		t.Helper()
		if err := tr.Publish(ctxT(t), transport.Message{Exchange: "amq.direct", RoutingKey: key, MessageID: id, Body: []byte(id)}); err != nil {
			t.Fatalf("Publish %s: %v", id, err)
		}
	}
	send("before")
	if d := c.next(t); d.MessageID != "before" {
		t.Fatalf("got %q, want before", d.MessageID)
	} else if err := d.Ack(); err != nil {
		t.Fatalf("Ack: %v", err)
	}

	if _, err := rawChannel(t, url).QueueDelete(q, false, false, false); err != nil {
		t.Fatalf("deleting %s from another connection: %v", q, err)
	}
	eventually(t, 10*time.Second, "the queue declared again with a consumer", func() bool {
		info, err := tr.Inspect(ctxT(t), q)
		return err == nil && info.Consumers == 1
	})
	send("after")
	if d := c.next(t); d.MessageID != "after" {
		t.Fatalf("got %q, want after", d.MessageID)
	} else if err := d.Ack(); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	eventually(t, 5*time.Second, "healthy again", func() bool { return tr.Health(ctxT(t)) == nil })
}

// TestConsumerResumesAfterConsumerTimeout (RabbitMQ 4.3 and later): a
// quorum queue whose consumer keeps a delivery past its consumer timeout
// has the consumer cancelled, the delivery back in the queue, and the
// channel left open. The consumer resumes by itself: the late Ack fails
// (its channel is gone), and the message comes again, redelivered.
func TestConsumerResumesAfterConsumerTimeout(t *testing.T) {
	url := brokerURL(t)
	need4(t, url, 4, 3)
	tr := dial(t, url, rabbitmq.Config{})
	q := acemqtest.QueueName(t, "timeout")
	if err := tr.Declare(ctxT(t), transport.Queue{Name: q, Quorum: true, Args: map[string]any{"x-consumer-timeout": 2000}}); err != nil {
		t.Fatalf("Declare: %v", err)
	}
	acemqtest.DeleteQueuesAfter(t, url, q)
	c := consume(t, tr, q, 10)
	if err := tr.Publish(ctxT(t), transport.Message{RoutingKey: q, MessageID: "slow", Body: []byte("slow")}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	first := c.next(t)
	if first.MessageID != "slow" || first.Redelivered {
		t.Fatalf("got %q (redelivered %v), want slow, first delivery", first.MessageID, first.Redelivered)
	}
	// Held past the timeout, which the broker checks about every few
	// seconds: the message comes back on the resumed consumer.
	var again transport.Delivery
	select {
	case again = <-c.deliveries:
	case <-time.After(90 * time.Second):
		t.Fatal("the message did not come again within 90 s of its consumer timeout (2 s)")
	}
	if again.MessageID != "slow" || !again.Redelivered {
		t.Fatalf("got %q (redelivered %v), want slow, redelivered", again.MessageID, again.Redelivered)
	}
	if err := first.Ack(); err == nil {
		t.Error("the Ack of the delivery the broker took back succeeded; want an error")
	}
	if err := again.Ack(); err != nil {
		t.Fatalf("Ack of the redelivery: %v", err)
	}
	eventually(t, 5*time.Second, "healthy again", func() bool { return tr.Health(ctxT(t)) == nil })
}

// need4 skips t unless the broker at url runs RabbitMQ major.minor or
// later. With ACEMQ_RABBITMQ4=1 (set by scripts/rabbitmq4.sh, which runs a
// 4.x node) a broker older than 4.0 fails it instead: the variable says a
// 4.x broker is under test, and a skip would hide that it is not.
func need4(t *testing.T, url string, major, minor int) {
	t.Helper()
	v := serverVersion(t, url)
	if versionAtLeast(v, major, minor) {
		return
	}
	msg := fmt.Sprintf("needs RabbitMQ %d.%d or later; this broker is %s (make test-rabbitmq4 runs it on a 4.3 node)", major, minor, v)
	if os.Getenv("ACEMQ_RABBITMQ4") == "1" && !versionAtLeast(v, 4, 0) {
		t.Fatal(msg + ", and ACEMQ_RABBITMQ4=1 says a 4.x broker is under test")
	}
	t.Skip(msg)
}

// skipFrom4 skips t, saying why, when the broker at url runs RabbitMQ 4.0
// or later.
func skipFrom4(t *testing.T, url, why string) {
	t.Helper()
	if v := serverVersion(t, url); versionAtLeast(v, 4, 0) {
		t.Skipf("RabbitMQ %s: %s", v, why)
	}
}

// serverVersion is the version the broker at url announces.
func serverVersion(t *testing.T, url string) string {
	t.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("amqp091 Dial: %v", err)
	}
	defer c.Close()
	v, _ := c.Properties["version"].(string)
	return v
}

func versionAtLeast(v string, major, minor int) bool {
	f := strings.SplitN(v, ".", 3)
	if len(f) < 2 {
		return false
	}
	a, err1 := strconv.Atoi(f[0])
	b, err2 := strconv.Atoi(f[1])
	return err1 == nil && err2 == nil && (a > major || a == major && b >= minor)
}

package console_test

import (
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/console"
)

type delayedReply struct {
	Delayed struct {
		Absent  bool
		Waiting int
		Levels  []struct {
			Queue    string
			Waits    string
			Messages int
		}
		Due, Unroutable int
		SoonestWithin   string
		SoonestBy       *time.Time
		Error           string
	}
}

// TestOverviewShowsDelayedMessages: on a broker of its own, the overview
// shows the delay topology as absent until a delayed message is sent,
// then how many wait at which level, the bound on the soonest, and a
// message no queue took at its due time as unroutable.
func TestOverviewShowsDelayedMessages(t *testing.T) {
	t.Parallel()
	url := acemqtest.Memory(t)
	c := connect(t, url)
	q := family(t, c, url)
	s := server(t, c, console.Queues(q))
	read := func() delayedReply {
		var o delayedReply
		getJSON(t, s, "/api/overview", &o)
		if o.Delayed.Error != "" {
			t.Fatalf("delayed: %s", o.Delayed.Error)
		}
		return o
	}
	if o := read(); !o.Delayed.Absent {
		t.Fatalf("delayed %+v before any delayed message, want absent", o.Delayed)
	}

	ctx := ctxT(t)
	pub := acemq.NewPublisher[acemq.Raw](c, "", q)
	for _, d := range []time.Duration{time.Hour, time.Hour, time.Minute} {
		if err := pub.Send(ctx, acemq.Raw(`{}`), acemq.After(d)); err != nil {
			t.Fatal(err)
		}
	}
	sent := time.Now()
	o := read()
	d := o.Delayed
	// A minute is 480 units of 125ms, highest bit level 8 (32s); an hour
	// is 28,800, level 14 (2048s).
	if d.Absent || d.Waiting != 3 || len(d.Levels) != 2 ||
		d.Levels[0].Queue != "acemq.delay.level.08" || d.Levels[0].Waits != "32s" || d.Levels[0].Messages != 1 ||
		d.Levels[1].Queue != "acemq.delay.level.14" || d.Levels[1].Messages != 2 {
		t.Fatalf("delayed %+v, want 3 waiting: 1 at level 8, 2 at level 14", d)
	}
	if d.SoonestWithin != "1m3.875s" || d.SoonestBy == nil || d.SoonestBy.Before(sent.Add(time.Minute)) {
		t.Errorf("soonest within %q by %v, want within 1m3.875s of the read", d.SoonestWithin, d.SoonestBy)
	}
	if d.Unroutable != 0 {
		t.Errorf("%d unroutable, want 0", d.Unroutable)
	}

	// Due in 250ms to a queue that does not exist: unroutable then.
	lost := acemq.NewPublisher[acemq.Raw](c, "", acemqtest.QueueName(t, "nowhere"))
	if err := lost.Send(ctx, acemq.Raw(`{}`), acemq.After(250*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		d = read().Delayed
		if d.Unroutable == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delayed %+v, want 1 unroutable", d)
		}
	}
	if d.Waiting != 3 {
		t.Errorf("%d waiting once one was unroutable, want the other 3", d.Waiting)
	}
}

// TestOverviewShowsDelayedMessagesOnRabbitMQ: on RabbitMQ, whose delay
// topology the tests share (so counts are at least, not exactly, what
// this test sent), a message sent with After(3s) shows as waiting in
// level 4 (2s), and arrives; nothing is left in the topology.
func TestOverviewShowsDelayedMessagesOnRabbitMQ(t *testing.T) {
	t.Parallel()
	url := acemqtest.RabbitMQ(t)
	c := connect(t, url)
	q := family(t, c, url)
	s := server(t, c, console.Queues(q))
	ctx := ctxT(t)
	pub := acemq.NewPublisher[acemq.Raw](c, "", q)
	// 3s is 24 units, 0b11000: 2s in level 4, then 1s in level 3.
	if err := pub.Send(ctx, acemq.Raw(`{}`), acemq.After(3*time.Second), acemq.MessageID("later")); err != nil {
		t.Fatal(err)
	}
	var o delayedReply
	getJSON(t, s, "/api/overview", &o)
	d := o.Delayed
	level4 := 0
	for _, l := range d.Levels {
		if l.Queue == "acemq.delay.level.04" {
			level4 = l.Messages
		}
	}
	if d.Absent || d.Error != "" || d.Waiting < 1 || level4 < 1 || d.SoonestWithin == "" {
		t.Errorf("delayed %+v, want at least the one sent waiting in level 4", d)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, ok, err := c.Transport().Get(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			_ = got.Ack()
			if got.MessageID != "later" {
				t.Fatalf("%s: message %q, want later", q, got.MessageID)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delayed message did not reach %s", q)
		}
	}
}

package rabbitmq_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// TestPublishKeyOrderAcrossCuts: eight keys, each published by its own
// goroutine in batches of 20 (PublishBatch, as SendAll does), on one
// publishing channel and on two, while the connection is cut under them
// again and again with batches in flight. In the queue each key's messages
// first appear in the order sent: a publish whose fate was lost with its
// connection is sent again before any later one of its key, so what the
// cuts add is only second copies of messages the broker had taken.
func TestPublishKeyOrderAcrossCuts(t *testing.T) {
	t.Parallel()
	for _, channels := range []int{1, 2} {
		t.Run(fmt.Sprintf("channels%d", channels), func(t *testing.T) {
			t.Parallel()
			keyOrderAcrossCuts(t, channels)
		})
	}
}

func keyOrderAcrossCuts(t *testing.T, channels int) {
	url := brokerURL(t)
	p := newProxy(t, hostOf(t, url))
	tr := dial(t, withHost(t, url, p.addr), rabbitmq.Config{Channels: channels})
	q := queue(t, tr, "keyorder", nil)
	const keys, per, batch = 8, 300, 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Every 16th batch confirmed cuts the connection, while the other
	// keys' batches are in flight: 7 cuts, however fast the broker is.
	var batches, cuts atomic.Int64
	var wg sync.WaitGroup
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("key-%d", k)
			for from := 1; from <= per; from += batch {
				ms := make([]transport.Message, 0, batch)
				for n := from; n < from+batch; n++ {
					ms = append(ms, transport.Message{RoutingKey: q, MessageID: fmt.Sprintf("%s/%d", key, n),
						Headers: map[string]any{"x-acemq-key": key}, Body: []byte(strconv.Itoa(n))})
				}
				for i, err := range tr.PublishBatch(ctx, ms) {
					if err != nil {
						t.Errorf("%s: %v", ms[i].MessageID, err)
						return
					}
				}
				if batches.Add(1)%16 == 0 {
					p.cut()
					cuts.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	next := map[string]int{}
	dups := 0
	for {
		d, ok, err := tr.Get(ctxT(t), q)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if !ok {
			break
		}
		_ = d.Ack()
		key, num, _ := strings.Cut(d.MessageID, "/")
		n, _ := strconv.Atoi(num)
		if next[key] == 0 {
			next[key] = 1
		}
		switch {
		case n == next[key]:
			next[key]++
		case n < next[key]:
			dups++
		default:
			t.Fatalf("%s: %d is in the queue before %d, which was sent first", key, n, next[key])
		}
	}
	for k := range keys {
		if got := next[fmt.Sprintf("key-%d", k)] - 1; got != per {
			t.Errorf("key-%d: %d of %d messages in the queue", k, got, per)
		}
	}
	t.Logf("%d keys × %d in order through %d cuts; %d second copies", keys, per, cuts.Load(), dups)
}

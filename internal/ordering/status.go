package ordering

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/acemq/acemq/transport"
)

// StatusQueue is where the instances of an ordered consumer say what they
// hold: each publishes a Status every StatusPeriod, and the queue's message
// TTL (StatusTTL) drops the old ones, so it holds the last few of each
// running instance. acemq stats reads it with Get and gives it all back.
func StatusQueue(queue string) string { return queue + ".status" }

// How often an instance publishes its status, and how long a status stays
// in StatusQueue.
const (
	StatusPeriod = 2 * time.Second
	StatusTTL    = 10 * time.Second
)

// StatusTopology is StatusQueue as the consumer declares it: a classic
// queue whose messages expire after StatusTTL and which the broker deletes
// once no instance has used it for membersExpiry, as MembersTopology's.
// Durable, though a status is worth nothing after a broker restart:
// RabbitMQ 4 deprecates transient non-exclusive queues.
func StatusTopology(queue string) transport.Queue {
	return transport.Queue{Name: StatusQueue(queue), Args: map[string]any{
		"x-message-ttl": StatusTTL.Milliseconds(),
		"x-expires":     membersExpiry.Milliseconds(),
	}}
}

// Status is what one instance of an ordered consumer says of itself.
type Status struct {
	Instance   string      `json:"instance"`   // host/pid/n: n counts the subscriptions of the process
	Partitions []int       `json:"partitions"` // held now, in order
	Unacked    map[int]int `json:"unacked"`    // per held partition: its deliveries in this instance's hands
	Time       time.Time   `json:"time"`
	Stopped    bool        `json:"stopped,omitempty"` // the last one of a subscription that ended
}

// runSeq numbers the subscriptions of the process, for Status.Instance.
var runSeq atomic.Int64

// instanceID names this subscription in its statuses.
func instanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + "/" + strconv.Itoa(os.Getpid()) + "/" + strconv.FormatInt(runSeq.Add(1), 10)
}

// status is what this run holds and has in hand now.
func (o *Run) status() Status {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := Status{Instance: o.id, Partitions: slices.Sorted(maps.Keys(o.held)), Unacked: map[int]int{}, Time: time.Now().UTC()}
	for _, i := range s.Partitions {
		s.Unacked[i] = 0
	}
	for _, l := range o.lanes {
		for _, it := range l.items {
			s.Unacked[it.p.i]++
		}
	}
	for _, it := range o.ready {
		if it.key == "" {
			s.Unacked[it.p.i]++
		}
	}
	return s
}

// reportStatus publishes the run's status every StatusPeriod until ctx
// ends, and then once more, marked Stopped. A publish that fails (the
// queue not declared, under NoDeclare; the broker away) is logged once at
// Debug and tried again at the next period: the status is for operators,
// never in the way of the deliveries.
func (o *Run) reportStatus(ctx context.Context) {
	logged := false
	publish := func(ctx context.Context, s Status) {
		body, err := json.Marshal(s)
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, StatusPeriod)
			err = o.cfg.T.Publish(pctx, transport.Message{
				RoutingKey: StatusQueue(o.cfg.Queue), MessageID: uuid.NewString(),
				ContentType: "application/json", Timestamp: s.Time.Truncate(time.Second), Body: body,
			})
			cancel()
		}
		if err != nil && !logged {
			logged = true
			o.cfg.logger().Debug("acemq: publishing the status of an ordered consumer failed", "queue", o.cfg.Queue, "error", err)
		}
	}
	t := time.NewTicker(StatusPeriod)
	defer t.Stop()
	for {
		publish(ctx, o.status())
		select {
		case <-ctx.Done():
			s := o.status()
			s.Stopped, s.Partitions, s.Unacked = true, nil, nil
			publish(context.WithoutCancel(ctx), s)
			return
		case <-t.C:
		}
	}
}

// ReadStatus returns the latest status of each instance of the ordered
// queue in its StatusQueue, leaving out those that stopped, by instance.
// It takes every message with Get and gives them all back, last first, so
// the queue is as it was; none when the queue does not exist.
func ReadStatus(ctx context.Context, t transport.Transport, queue string) ([]Status, error) {
	info, err := t.Inspect(ctx, StatusQueue(queue))
	switch {
	case isNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", StatusQueue(queue), err)
	}
	var taken []transport.Delivery
	defer func() {
		for i := len(taken) - 1; i >= 0; i-- {
			_ = taken[i].Nack(true)
		}
	}()
	latest := map[string]Status{}
	for range info.Messages {
		d, ok, err := t.Get(ctx, StatusQueue(queue))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", StatusQueue(queue), err)
		}
		if !ok {
			break
		}
		taken = append(taken, d)
		var s Status
		if json.Unmarshal(d.Body, &s) != nil || s.Instance == "" {
			continue
		}
		if old, ok := latest[s.Instance]; !ok || !s.Time.Before(old.Time) {
			latest[s.Instance] = s
		}
	}
	var out []Status
	for _, id := range slices.Sorted(maps.Keys(latest)) {
		if s := latest[id]; !s.Stopped {
			out = append(out, s)
		}
	}
	return out, nil
}

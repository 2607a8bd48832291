package acemq

import (
	"context"
	"sync"
	"time"

	"github.com/acemq/acemq/internal/wire"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the engine's instruments.
const meterName = "github.com/acemq/acemq"

// Attribute keys, after the OpenTelemetry messaging conventions.
const (
	attrSystem      = attribute.Key("messaging.system")
	attrDestination = attribute.Key("messaging.destination.name")
	attrOutcome     = attribute.Key("messaging.acemq.outcome")
)

// The outcomes of a publish on acemq.publish.total.
const (
	publishConfirmed = "confirmed"
	publishRefused   = "refused"
	publishFailed    = "failed"
)

// instruments are the engine's metrics, created once per Conn.
type instruments struct {
	publishTotal    metric.Int64Counter
	publishDuration metric.Float64Histogram
	consumeTotal    metric.Int64Counter
	consumeDuration metric.Float64Histogram
	deadLettered    metric.Int64Counter
	paused          metric.Int64ObservableGauge
	blockedKeys     metric.Int64ObservableGauge
	batchSize       metric.Float64Histogram
	keyless         metric.Int64Counter
	fencedTotal     metric.Int64Counter
	redelivered     metric.Int64Counter
	oldestInFlight  metric.Float64ObservableGauge
	delayLateness   metric.Float64Histogram

	meter        metric.Meter
	registration metric.Registration // paused's and oldestInFlight's callback, until the Conn closes
	regMu        sync.Mutex

	mu    sync.RWMutex
	attrs map[string]map[string]*attrOpts // destination -> outcome -> options, built once
}

// attrOpts are ready-made option slices: passing them spread allocates
// nothing, where a fresh variadic call would allocate its slice each time.
type attrOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func newInstruments(mp metric.MeterProvider) (*instruments, error) {
	m := mp.Meter(meterName)
	var (
		in   instruments
		errs [13]error
	)
	in.meter = m
	in.publishTotal, errs[0] = m.Int64Counter("acemq.publish.total",
		metric.WithDescription("Messages published, by outcome: confirmed, refused (by an interceptor) or failed."),
		metric.WithUnit("{message}"))
	in.publishDuration, errs[1] = m.Float64Histogram("acemq.publish.duration",
		metric.WithDescription("Time from encoding to the broker's confirm."),
		metric.WithUnit("s"))
	in.consumeTotal, errs[2] = m.Int64Counter("acemq.consume.total",
		metric.WithDescription("Deliveries settled, by outcome: acked, retried, rejected, dead_lettered or parked."),
		metric.WithUnit("{message}"))
	in.consumeDuration, errs[3] = m.Float64Histogram("acemq.consume.duration",
		metric.WithDescription("Time spent in the handler alone."),
		metric.WithUnit("s"))
	in.deadLettered, errs[4] = m.Int64Counter("acemq.messages.dead.lettered.total",
		metric.WithDescription("Deliveries sent to a dead-letter queue (rejected or dead_lettered)."),
		metric.WithUnit("{message}"))
	in.paused, errs[5] = m.Int64ObservableGauge("acemq.consumer.paused",
		metric.WithDescription("Running consumers of the queue that are paused, by Pause or by their kill switch."),
		metric.WithUnit("{consumer}"))
	in.blockedKeys, errs[6] = m.Int64ObservableGauge("acemq.consumer.blocked_keys",
		metric.WithDescription("Keys an ordered consumer blocked, in the partitions this instance holds (sum over instances for the queue's)."),
		metric.WithUnit("{key}"))
	in.batchSize, errs[7] = m.Float64Histogram("acemq.consume.batch.size",
		metric.WithDescription("Messages in each batch handed to a batch handler."),
		metric.WithUnit("{message}"))
	in.keyless, errs[8] = m.Int64Counter("acemq.consumer.keyless.total",
		metric.WithDescription("Messages without a key that an ordered consumer parked (not counted with OrderPolicy.AllowKeyless)."),
		metric.WithUnit("{message}"))
	in.fencedTotal, errs[9] = m.Int64Counter("acemq.consumer.fenced.total",
		metric.WithDescription("Deliveries of an ordered consumer given back unsettled because the handler's write was refused for its fencing token (ErrPartitionLost)."),
		metric.WithUnit("{message}"))
	in.redelivered, errs[10] = m.Int64Counter("acemq.consume.redelivered.total",
		metric.WithDescription("Deliveries the broker had delivered before without a settlement (a consumer that died holding them, or gave them back), by the outcome they settled with now."),
		metric.WithUnit("{message}"))
	in.oldestInFlight, errs[11] = m.Float64ObservableGauge("acemq.consumer.oldest_inflight",
		metric.WithDescription("How long the oldest delivery a running consumer of the queue holds in a handler has been there (0 when none); over StuckAfter, Health reports the consumer stuck."),
		metric.WithUnit("s"))
	in.delayLateness, errs[12] = m.Float64Histogram("acemq.consumer.delay.lateness",
		metric.WithDescription("How long after its due time (After, At) a delayed message reached its consumer, on its first delivery; negative would mean early, which acemq never is by its own clock."),
		metric.WithUnit("s"))
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	in.attrs = make(map[string]map[string]*attrOpts)
	return &in, nil
}

// attributes returns the options for a destination and outcome (none when
// outcome is empty), built once and reused so recording allocates nothing.
func (in *instruments) attributes(destination, outcome string) *attrOpts {
	in.mu.RLock()
	opts, ok := in.attrs[destination][outcome]
	in.mu.RUnlock()
	if ok {
		return opts
	}
	kv := []attribute.KeyValue{attrSystem.String("rabbitmq"), attrDestination.String(destination)}
	if outcome != "" { // the batch size and the keyless and fenced counts have no outcome
		kv = append(kv, attrOutcome.String(outcome))
	}
	set := metric.WithAttributeSet(attribute.NewSet(kv...))
	opts = &attrOpts{add: []metric.AddOption{set}, record: []metric.RecordOption{set}}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.attrs[destination] == nil {
		in.attrs[destination] = make(map[string]*attrOpts)
	}
	if prev, ok := in.attrs[destination][outcome]; ok {
		return prev
	}
	in.attrs[destination][outcome] = opts
	return opts
}

// forget drops the attributes built for destination: a queue no consumer
// of the Conn takes from any more. They are built again if it comes back.
func (in *instruments) forget(destination string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.attrs, destination)
}

// observeConsumers reports, at each collection until stopObserving,
// acemq.consumer.paused from paused, the number of paused consumers of each
// queue that has running ones, and acemq.consumer.oldest_inflight from
// oldest, the age of the oldest delivery in a handler of each such queue.
func (in *instruments) observeConsumers(paused func() map[string]int64, oldest func() map[string]time.Duration) error {
	reg, err := in.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for queue, n := range paused() {
			o.ObserveInt64(in.paused, n, metric.WithAttributeSet(attribute.NewSet(
				attrSystem.String("rabbitmq"), attrDestination.String(queue))))
		}
		for queue, age := range oldest() {
			o.ObserveFloat64(in.oldestInFlight, age.Seconds(), metric.WithAttributeSet(attribute.NewSet(
				attrSystem.String("rabbitmq"), attrDestination.String(queue))))
		}
		return nil
	}, in.paused, in.oldestInFlight)
	if err != nil {
		return err
	}
	in.regMu.Lock()
	in.registration = reg
	in.regMu.Unlock()
	return nil
}

// stopObserving unregisters the paused and oldest_inflight gauges' callback.
func (in *instruments) stopObserving() {
	in.regMu.Lock()
	defer in.regMu.Unlock()
	if in.registration != nil {
		_ = in.registration.Unregister()
		in.registration = nil
	}
}

// published records one publish; seconds < 0 means it never reached the
// transport and has no duration.
func (in *instruments) published(ctx context.Context, exchange, outcome string, seconds float64) {
	opts := in.attributes(wire.ExchangeName(exchange), outcome)
	in.publishTotal.Add(ctx, 1, opts.add...)
	if seconds >= 0 && outcome != publishRefused {
		in.publishDuration.Record(ctx, seconds, opts.record...)
	}
}

// settled records one settled delivery; seconds < 0 means the handler did
// not run.
func (in *instruments) settled(ctx context.Context, queue string, o Outcome, seconds float64) {
	opts := in.attributes(queue, string(o))
	in.consumeTotal.Add(ctx, 1, opts.add...)
	if seconds >= 0 {
		in.consumeDuration.Record(ctx, seconds, opts.record...)
	}
	if o == OutcomeRejected || o == OutcomeDeadLettered {
		in.deadLettered.Add(ctx, 1, opts.add...)
	}
}

// lateness records how late a delayed message of queue arrived.
func (in *instruments) lateness(ctx context.Context, queue string, seconds float64) {
	in.delayLateness.Record(ctx, seconds, in.attributes(queue, "").record...)
}

// redelivery records a delivery of queue that the broker had delivered
// before, settled now with outcome.
func (in *instruments) redelivery(ctx context.Context, queue string, outcome Outcome) {
	in.redelivered.Add(ctx, 1, in.attributes(queue, string(outcome)).add...)
}

// fenced records a delivery of queue given back because its handler's
// write was fenced (it answered with ErrPartitionLost).
func (in *instruments) fenced(ctx context.Context, queue string) {
	in.fencedTotal.Add(ctx, 1, in.attributes(queue, "").add...)
}

// parkedKeyless records a message without a key that an ordered consumer
// of queue parked (it is also one parked on acemq.consume.total).
func (in *instruments) parkedKeyless(ctx context.Context, queue string) {
	in.keyless.Add(ctx, 1, in.attributes(queue, "").add...)
}

var epoch = time.Now()

// nowNano is a monotonic clock reading.
func nowNano() int64 { return int64(time.Since(epoch)) }

func sinceSeconds(start int64) float64 { return float64(nowNano()-start) / 1e9 }

// observeBlocked reports acemq.consumer.blocked_keys for queue, counted by
// count, until the registration is unregistered.
func (in *instruments) observeBlocked(queue string, count func() int) (metric.Registration, error) {
	set := metric.WithAttributeSet(attribute.NewSet(attrSystem.String("rabbitmq"), attrDestination.String(queue)))
	return in.meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		ob.ObserveInt64(in.blockedKeys, int64(count()), set)
		return nil
	}, in.blockedKeys)
}

package outbox

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the outbox's instruments.
const meterName = "github.com/acemq/acemq/outbox"

// The outbox's instruments, all with the attribute db.collection.name set
// to the table's name.
const (
	// MetricPending is an Int64ObservableGauge of the rows in the table
	// waiting to be relayed (dead ones not included), observed with a
	// COUNT(*) at each collection.
	MetricPending = "acemq.outbox.pending"
	// MetricDead is an Int64ObservableGauge of the dead-lettered rows in
	// the table, observed with a COUNT(*) at each collection.
	MetricDead = "acemq.outbox.dead"
	// MetricDeadLettered is an Int64Counter of rows a Relay dead-lettered
	// after MaxAttempts failures.
	MetricDeadLettered = "acemq.outbox.dead_lettered"
	// MetricRelayed is an Int64Counter of rows published, confirmed and
	// deleted by a Relay.
	MetricRelayed = "acemq.outbox.relayed"
	// MetricFailed is an Int64Counter of publish attempts that failed and
	// pushed their row back.
	MetricFailed = "acemq.outbox.failed"
	// MetricLag is a Float64Histogram of the seconds from a row's due_at to
	// its broker confirm.
	MetricLag = "acemq.outbox.lag"
)

const attrTable = attribute.Key("db.collection.name")

// pendingTimeout bounds each COUNT(*) behind one observation of the gauges.
const pendingTimeout = 5 * time.Second

type instruments struct {
	relayed metric.Int64Counter
	failed  metric.Int64Counter
	dead    metric.Int64Counter
	lag     metric.Float64Histogram
	attrs   metric.MeasurementOption

	mu  sync.Mutex
	reg metric.Registration // nil once closed
}

func newInstruments(mp metric.MeterProvider, o *Outbox) (*instruments, error) {
	m := mp.Meter(meterName)
	set := attribute.NewSet(attrTable.String(o.table))
	in := &instruments{attrs: metric.WithAttributeSet(set)}
	var errs [6]error
	in.relayed, errs[0] = m.Int64Counter(MetricRelayed,
		metric.WithDescription("Outbox rows published, confirmed and deleted by a relay."),
		metric.WithUnit("{message}"))
	in.failed, errs[1] = m.Int64Counter(MetricFailed,
		metric.WithDescription("Outbox publish attempts that failed; the row was pushed back."),
		metric.WithUnit("{message}"))
	in.lag, errs[2] = m.Float64Histogram(MetricLag,
		metric.WithDescription("Time from a row's due_at to its broker confirm."),
		metric.WithUnit("s"))
	in.dead, errs[3] = m.Int64Counter(MetricDeadLettered,
		metric.WithDescription("Outbox rows dead-lettered after their last allowed attempt failed."),
		metric.WithUnit("{message}"))
	var pending, dead metric.Int64ObservableGauge
	pending, errs[4] = m.Int64ObservableGauge(MetricPending,
		metric.WithDescription("Rows in the outbox table waiting to be relayed: due, scheduled or failing."),
		metric.WithUnit("{message}"))
	dead, errs[5] = m.Int64ObservableGauge(MetricDead,
		metric.WithDescription("Dead-lettered rows in the outbox table, waiting to be replayed or deleted."),
		metric.WithUnit("{message}"))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	observe := metric.WithAttributeSet(set)
	reg, err := m.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, pendingTimeout)
		defer cancel()
		// Each gauge on its own: a count that failed (SQLite busy under a
		// relay's write, say) leaves the other reported.
		n, perr := o.Pending(ctx)
		if perr == nil {
			obs.ObserveInt64(pending, n, observe)
		}
		n, derr := o.Dead(ctx)
		if derr == nil {
			obs.ObserveInt64(dead, n, observe)
		}
		return errors.Join(perr, derr)
	}, pending, dead)
	if err != nil {
		return nil, err
	}
	in.reg = reg
	return in, nil
}

func (in *instruments) close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.reg == nil {
		return nil
	}
	err := in.reg.Unregister()
	in.reg = nil
	return err
}

// relayedOne records a confirmed row and its lag behind due.
func (in *instruments) relayedOne(ctx context.Context, due time.Time, confirmed time.Time) {
	in.relayed.Add(ctx, 1, in.attrs)
	in.lag.Record(ctx, max(0, confirmed.Sub(due).Seconds()), in.attrs)
}

// deadOne records a dead-lettered row.
func (in *instruments) deadOne(ctx context.Context) {
	in.dead.Add(ctx, 1, in.attrs)
}

// failedOne records a failed publish attempt.
func (in *instruments) failedOne(ctx context.Context) {
	in.failed.Add(ctx, 1, in.attrs)
}

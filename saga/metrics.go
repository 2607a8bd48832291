package saga

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the saga's instruments.
const meterName = "github.com/acemq/acemq/saga"

// The saga's instruments, with the attribute acemq.saga.name.
const (
	// MetricSteps is an Int64Counter of step runs, by acemq.saga.outcome:
	// committed (the step's transaction committed), duplicate (the
	// message was handled before; nothing ran), conflict_retried (another
	// step saved first; the transaction rolled back and the step runs
	// again, or the message is retried after the last rerun) and failed
	// (the step returned an error, or the database failed).
	MetricSteps = "acemq.saga.steps"
	// MetricOpen is an Int64ObservableGauge of the instances not completed,
	// observed with a COUNT(*) at each collection.
	MetricOpen = "acemq.saga.open"
)

// The outcomes of MetricSteps, the values of acemq.saga.outcome.
const (
	// OutcomeCommitted is a step whose transaction committed.
	OutcomeCommitted = "committed"
	// OutcomeDuplicate is a message handled before: no step ran.
	OutcomeDuplicate = "duplicate"
	// OutcomeConflictRetried is a step rolled back by a version conflict.
	OutcomeConflictRetried = "conflict_retried"
	// OutcomeStale is a step refused because its message's fence
	// (acemq.Message.Fence) is below the one that last saved the instance:
	// a stale holder of an ordered queue's partition.
	OutcomeStale = "stale"
	// OutcomeFailed is a step that returned an error, or whose
	// transaction the database failed.
	OutcomeFailed = "failed"
)

const (
	attrName    = attribute.Key("acemq.saga.name")
	attrOutcome = attribute.Key("acemq.saga.outcome")
)

// openTimeout bounds the COUNT(*) behind one observation of the gauge.
const openTimeout = 5 * time.Second

type instruments struct {
	steps    metric.Int64Counter
	outcomes map[string]metric.AddOption

	mu  sync.Mutex
	reg metric.Registration // nil once closed
}

func newInstruments(mp metric.MeterProvider, name string, countOpen func(context.Context) (int64, error)) (*instruments, error) {
	m := mp.Meter(meterName)
	in := &instruments{outcomes: make(map[string]metric.AddOption)}
	for _, o := range []string{OutcomeCommitted, OutcomeDuplicate, OutcomeConflictRetried, OutcomeStale, OutcomeFailed} {
		in.outcomes[o] = metric.WithAttributeSet(attribute.NewSet(attrName.String(name), attrOutcome.String(o)))
	}
	var errs [2]error
	in.steps, errs[0] = m.Int64Counter(MetricSteps,
		metric.WithDescription("Saga step runs, by outcome: committed, duplicate, conflict_retried or failed."),
		metric.WithUnit("{step}"))
	var open metric.Int64ObservableGauge
	open, errs[1] = m.Int64ObservableGauge(MetricOpen,
		metric.WithDescription("Saga instances not completed."),
		metric.WithUnit("{instance}"))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	observe := metric.WithAttributeSet(attribute.NewSet(attrName.String(name)))
	reg, err := m.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, openTimeout)
		defer cancel()
		n, err := countOpen(ctx)
		if err != nil {
			return err
		}
		obs.ObserveInt64(open, n, observe)
		return nil
	}, open)
	if err != nil {
		return nil, err
	}
	in.reg = reg
	return in, nil
}

// step counts one step run with its outcome.
func (in *instruments) step(ctx context.Context, outcome string) {
	in.steps.Add(ctx, 1, in.outcomes[outcome])
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

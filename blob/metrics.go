package blob

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the package's instruments.
const meterName = "github.com/acemq/acemq/blob"

// The package's instruments, all Int64Counters, created by every
// Publisher, Handle and WithClaimCheck on the provider WithMeterProvider
// gives (the global one by default).
const (
	// MetricStored counts the bytes stored by successful Puts, in bytes.
	MetricStored = "acemq.blob.stored"
	// MetricRead counts the bytes read back from a store, in bytes.
	MetricRead = "acemq.blob.read"
	// MetricSwept counts the objects a Sweep deleted.
	MetricSwept = "acemq.blob.swept"
)

// instruments counts a store's traffic (it is the Counter that Counted
// reports to).
type instruments struct {
	stored, read, swept metric.Int64Counter
}

func newInstruments(mp metric.MeterProvider) *instruments {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(meterName)
	// A provider that fails to create an instrument returns a no-op one
	// beside the error: counting stops, the payloads do not.
	stored, _ := m.Int64Counter(MetricStored, metric.WithUnit("By"), metric.WithDescription("Bytes stored by successful Puts."))
	read, _ := m.Int64Counter(MetricRead, metric.WithUnit("By"), metric.WithDescription("Bytes read back from a store."))
	swept, _ := m.Int64Counter(MetricSwept, metric.WithUnit("{object}"), metric.WithDescription("Expired objects deleted by a sweep."))
	return &instruments{stored: stored, read: read, swept: swept}
}

func (i *instruments) Stored(n int64) { i.stored.Add(context.Background(), n) }
func (i *instruments) Read(n int64)   { i.read.Add(context.Background(), n) }

// SweepCounted runs Sweep on s at now and adds the objects it deleted to
// MetricSwept on mp (the global provider when nil): the sweep of a service
// that exports metrics, and of acemq blob sweep.
func SweepCounted(ctx context.Context, s Store, now time.Time, mp metric.MeterProvider) (int, error) {
	n, err := Sweep(ctx, s, now)
	if n > 0 {
		newInstruments(mp).swept.Add(ctx, int64(n))
	}
	return n, err
}

package acemq_test

import (
	"context"
	"errors"
	"testing"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// points reads every data point of the named instrument as attribute sets
// mapped to their values (sums) or counts (histograms).
func points(t *testing.T, reader *sdkmetric.ManualReader, name string) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/acemq/acemq" {
			continue
		}
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[attrs(p.Attributes)] += float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[attrs(p.Attributes)] += float64(p.Count)
				}
			}
		}
	}
	return out
}

func attrs(s attribute.Set) string {
	var out string
	for _, kv := range s.ToSlice() {
		out += string(kv.Key) + "=" + kv.Value.String() + " "
	}
	return out
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	errRefused := errors.New("refused")
	got, opt := newSettlements()
	c := connect(t, opt, acemq.WithMeterProvider(mp), acemq.WithRetryPolicy(acemq.RetryPolicy{MaxAttempts: 2, Delays: fastRetry.Delays}),
		acemq.WithPublishInterceptor(func(_ context.Context, p *acemq.PublishContext) error {
			if o, ok := p.Payload.(OrderPlaced); ok && o.OrderID == "refuse" {
				return errRefused
			}
			return nil
		}),
		acemq.WithConsumeInterceptor(func(_ context.Context, c *acemq.ConsumeContext) error {
			if c.Envelope.Headers["x-refuse"] == true {
				return errRefused
			}
			return nil
		}))
	q := acemqtestQueue(t)
	cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
		switch m.Payload.OrderID {
		case "retry":
			return acemq.Retry(errors.New("again"))
		case "reject":
			return acemq.Reject(errors.New("no"))
		}
		return acemq.Done()
	})
	require.NoError(t, err)
	run(t, cons)
	pub := acemq.NewPublisher[OrderPlaced](c, "", q)
	ctx := ctxT(t)
	require.NoError(t, pub.Send(ctx, OrderPlaced{OrderID: "ok"}))
	require.NoError(t, pub.Send(ctx, OrderPlaced{OrderID: "retry"}))
	require.NoError(t, pub.Send(ctx, OrderPlaced{OrderID: "reject"}))
	require.NoError(t, pub.Send(ctx, OrderPlaced{OrderID: "refused-on-consume"}, acemq.Header("x-refuse", true)))
	require.ErrorIs(t, pub.Send(ctx, OrderPlaced{OrderID: "refuse"}), errRefused)
	require.ErrorIs(t, acemq.NewPublisher[OrderPlaced](c, "", "nowhere").Send(ctx, OrderPlaced{}), acemq.ErrUnroutable)
	require.NoError(t, acemq.NewPublisher[acemq.Raw](c, "", q, acemq.ContentType("application/json")).Send(ctx, acemq.Raw("{")))
	for range 6 { // ok, retry (retried then dead_lettered), reject, refused, parked
		got.next(t)
	}
	got.none(t)

	const sys = "messaging.system=rabbitmq "
	dest := "messaging.destination.name=" + q + " "
	def := "messaging.destination.name=amq.default "
	outcome := func(o string) string { return "messaging.acemq.outcome=" + o + " " }

	pt := points(t, reader, "acemq.publish.total")
	assert.Equal(t, 1.0, pt[outcome("refused")+def+sys], "%v", pt)
	assert.Equal(t, 1.0, pt[outcome("failed")+def+sys], "%v", pt)
	// 5 sends, plus the engine's moves: 1 retry, 2 dead letters after it and the rejection, 1 refusal, 1 park.
	assert.Equal(t, 5.0+1+2+1+1, pt[outcome("confirmed")+def+sys], "%v", pt)
	pd := points(t, reader, "acemq.publish.duration")
	assert.Equal(t, 10.0, pd[outcome("confirmed")+def+sys], "%v", pd)
	assert.NotContains(t, pd, outcome("refused")+def+sys, "a refused publish has no duration")

	ct := points(t, reader, "acemq.consume.total")
	assert.Equal(t, map[string]float64{
		outcome("acked") + dest + sys:         1,
		outcome("retried") + dest + sys:       1,
		outcome("dead_lettered") + dest + sys: 2,
		outcome("rejected") + dest + sys:      1,
		outcome("parked") + dest + sys:        1,
	}, ct)
	cd := points(t, reader, "acemq.consume.duration")
	assert.Equal(t, map[string]float64{
		outcome("acked") + dest + sys:         1,
		outcome("retried") + dest + sys:       1,
		outcome("dead_lettered") + dest + sys: 1, // the refusal never reached a handler
		outcome("rejected") + dest + sys:      1,
	}, cd, "the handler alone is timed")
	dl := points(t, reader, "acemq.messages.dead.lettered.total")
	assert.Equal(t, map[string]float64{
		outcome("dead_lettered") + dest + sys: 2,
		outcome("rejected") + dest + sys:      1,
	}, dl)
}

// A delivery's metrics are recorded before its OnSettled hooks run, and a
// publish's before Send returns.
func TestMetricsAreRecordedBeforeTheyAreReported(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	counted := make(chan float64, 1)
	c := connect(t, acemq.WithMeterProvider(mp), acemq.OnSettled(func(context.Context, acemq.Settlement) {
		var total float64
		for _, v := range points(t, reader, "acemq.consume.total") {
			total += v
		}
		counted <- total
	}))
	q := acemqtestQueue(t)
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
	require.NoError(t, err)
	run(t, cons)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	var published float64
	for _, v := range points(t, reader, "acemq.publish.total") {
		published += v
	}
	assert.Equal(t, 1.0, published, "the publish was counted before Send returned")
	assert.Equal(t, 1.0, <-counted, "the delivery was counted before OnSettled ran")
}

// A Router's deliveries are counted and timed as a Consumer's are: the
// same instruments, the same outcomes, the handler alone timed.
func TestRouterMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	got, opt := newSettlements()
	c := connect(t, opt, acemq.WithMeterProvider(mp))
	q := acemqtestQueue(t)
	r := acemq.NewRouter(c, q)
	acemq.Route(r, func(context.Context, *acemq.Message[OrderPlaced]) acemq.Ack { return acemq.Done() })
	acemq.Route(r, func(context.Context, *acemq.Message[Refund]) acemq.Ack { return acemq.Reject(errors.New("no")) })
	run(t, r)
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{}))
	require.NoError(t, acemq.NewPublisher[Refund](c, "", q).Send(ctxT(t), Refund{}))
	require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q, acemq.TypeName("Unknown")).Send(ctxT(t), OrderPlaced{}))
	for range 3 {
		got.next(t)
	}

	const sys = "messaging.system=rabbitmq "
	dest := "messaging.destination.name=" + q + " "
	outcome := func(o string) string { return "messaging.acemq.outcome=" + o + " " }
	assert.Equal(t, map[string]float64{
		outcome("acked") + dest + sys:    1,
		outcome("rejected") + dest + sys: 1,
		outcome("parked") + dest + sys:   1,
	}, points(t, reader, "acemq.consume.total"))
	assert.Equal(t, map[string]float64{
		outcome("acked") + dest + sys:    1,
		outcome("rejected") + dest + sys: 1,
	}, points(t, reader, "acemq.consume.duration"), "a message no route takes reaches no handler")
	assert.Equal(t, map[string]float64{
		outcome("rejected") + dest + sys: 1,
	}, points(t, reader, "acemq.messages.dead.lettered.total"))
}

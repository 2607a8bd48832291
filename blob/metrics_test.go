package blob_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// counters reads the Int64 sums of a manual reader by name.
func counters(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(t.Context(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					out[m.Name] += dp.Value
				}
			}
		}
	}
	return out
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	url := "memory://"
	st, hook := newSettlements()
	c := connect(t, url, hook)
	q := queue(t, url, "blob-metrics")
	s := blob.Memory()
	run(t, c, q, blob.Handle(s, func(_ context.Context, _ *acemq.Message[meta], body *blob.Reader) acemq.Ack {
		_, err := io.Copy(io.Discard, body)
		return acemq.AckOf(err)
	}, blob.WithMeterProvider(mp)))
	_, err := blob.NewPublisher[meta](c, s, "", q, blob.WithMeterProvider(mp)).Send(t.Context(), meta{}, payload(1, 3<<20))
	require.NoError(t, err)
	require.Equal(t, acemq.OutcomeAcked, st.next(t, 10*time.Second).Outcome)
	_, err = s.Put(t.Context(), "old", payload(2, 10), time.Now().Add(-time.Hour))
	require.NoError(t, err)
	n, err := blob.SweepCounted(t.Context(), s, time.Now(), mp)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got := counters(t, reader)
	require.Equal(t, int64(3<<20), got[blob.MetricStored])
	require.Equal(t, int64(3<<20), got[blob.MetricRead])
	require.Equal(t, int64(1), got[blob.MetricSwept])
}

// TestReaderEndsWithTheHandler: a handler that stops reading early, or
// panics mid-read, leaves no read-ahead goroutine behind (TestMain's
// goleak check fails the package otherwise), and a Reader kept past its
// handler fails.
func TestReaderEndsWithTheHandler(t *testing.T) {
	url := "memory://"
	st, hook := newSettlements()
	c := connect(t, url, hook)
	q := queue(t, url, "blob-leak")
	s := blob.Memory()
	kept := make(chan *blob.Reader, 1)
	run(t, c, q, blob.Handle(s, func(_ context.Context, m *acemq.Message[meta], body *blob.Reader) acemq.Ack {
		if _, err := io.CopyN(io.Discard, body, blob.ChunkSize+1); err != nil {
			return acemq.Retry(err)
		}
		if m.Payload.Name == "panic" {
			panic("mid-read")
		}
		kept <- body
		return acemq.Done()
	}))
	p := blob.NewPublisher[meta](c, s, "", q)
	for _, name := range []string{"panic", "early"} {
		_, err := p.Send(t.Context(), meta{Name: name}, payload(1, 8<<20))
		require.NoError(t, err)
	}
	outcomes := []acemq.Outcome{st.next(t, 10*time.Second).Outcome, st.next(t, 10*time.Second).Outcome}
	require.ElementsMatch(t, []acemq.Outcome{acemq.OutcomeRejected, acemq.OutcomeAcked}, outcomes)
	_, err := (<-kept).Read(make([]byte, 10))
	require.True(t, err != nil && !errors.Is(err, io.EOF))
	require.ErrorContains(t, err, "after its handler returned")
}

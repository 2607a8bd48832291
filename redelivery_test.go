package acemq_test

import (
	"context"
	"strings"
	"testing"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestRedeliveryIsCounted (issue 37 item 9): a delivery whose consumer went
// without settling it (its Conn closed under the handler, as a SIGKILL
// would) settles, when it comes again, with Settlement.Redelivered set and
// is counted on acemq.consume.redelivered.total by outcome. Its Attempt is
// still the ladder's: a pause gives deliveries back the same way and must
// not spend their attempts.
func TestRedeliveryIsCounted(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := consumerQueue(t, url, acemq.RetryPolicy{})
		first := connectURL(t, url)
		started := make(chan int, 1)
		release := make(chan struct{})
		cons, err := acemq.NewConsumer(first, q, func(ctx context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			started <- m.Envelope.Attempt
			// Held past the Conn's end, as a process killed mid-handler
			// holds it: the transport closes first, so Done below finds
			// nothing to ack and the broker has given the delivery back.
			<-release
			return acemq.Done()
		})
		require.NoError(t, err)
		run(t, cons)
		require.NoError(t, acemq.NewPublisher[OrderPlaced](first, "", q).Send(ctxT(t), OrderPlaced{OrderID: "held"}))
		require.Equal(t, 1, <-started)

		reader := sdkmetric.NewManualReader()
		got, opt := newSettlements()
		second := connectURL(t, url, opt, acemq.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
		cons2, err := acemq.NewConsumer(second, q, func(_ context.Context, m *acemq.Message[OrderPlaced]) acemq.Ack {
			return acemq.Done()
		})
		require.NoError(t, err)
		run(t, cons2)
		closed := make(chan error, 1)
		go func() { closed <- first.Close() }() // the consumer is gone, the delivery unsettled
		defer func() {
			close(release)
			<-closed
		}()
		s := got.next(t)
		require.Equal(t, acemq.OutcomeAcked, s.Outcome)
		require.True(t, s.Redelivered, "the settlement says the broker delivered it before")
		require.Equal(t, 1, s.Attempt, "a redelivery does not spend an attempt of the ladder")
		var counted float64
		for attrs, n := range points(t, reader, "acemq.consume.redelivered.total") {
			if strings.Contains(attrs, q) && strings.Contains(attrs, "acked") {
				counted += n
			}
		}
		require.Equal(t, float64(1), counted)

		// A first delivery is not a redelivery.
		require.NoError(t, acemq.NewPublisher[OrderPlaced](second, "", q).Send(ctxT(t), OrderPlaced{OrderID: "fresh"}))
		require.False(t, got.next(t).Redelivered)
	})
}

package acemq_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
)

// TestBrokerRulesOnEveryPath: what RabbitMQ refuses (a short string over
// 255 bytes in a declaration or a transport-level publish) or cannot parse
// (a NaN header) or what the outbox cannot read back (a header time after
// 9999) fails with an error naming the field and the limit, on both
// transports, and the Conn keeps working: Health nil, a Send confirmed.
func TestBrokerRulesOnEveryPath(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("n", 300)
	onBrokers(t, func(t *testing.T, url string) {
		c := connectURL(t, url)
		q := declareQueue(t, c)
		ex := acemqtestQueue(t) + ".x"
		require.NoError(t, c.Declare(ctxT(t), acemq.Exchange{Name: ex}))
		t.Cleanup(func() { _ = c.Transport().DeleteExchange(ctxT(t), ex) })
		pub := acemq.NewPublisher[OrderPlaced](c, "", q)

		for _, tc := range []struct {
			name, field, limit string
			do                 func() error
		}{
			{"queue argument name", "argument name of 300 bytes", "255", func() error {
				return c.Declare(ctxT(t), acemq.Queue{Name: q + ".args", Args: map[string]any{long: int64(1)}})
			}},
			{"binding key", "binding key is 300 bytes", "255", func() error {
				return c.Declare(ctxT(t), acemq.Binding{Exchange: ex, Key: long, Queue: q})
			}},
			{"exchange name", "exchange name is 300 bytes", "255", func() error {
				return c.Declare(ctxT(t), acemq.Exchange{Name: long})
			}},
			{"exchange-to-exchange binding key", "binding key is 300 bytes", "255", func() error {
				return c.Declare(ctxT(t), acemq.ExchangeBinding{Source: ex, Key: long, Destination: ex})
			}},
			{"routing key through Transport().Publish", "routing key is 300 bytes", "255", func() error {
				return c.Transport().Publish(ctxT(t), transport.Message{RoutingKey: long, MessageID: "long"})
			}},
			{"NaN header at Send", `header "f"`, "NaN", func() error {
				return pub.Send(ctxT(t), OrderPlaced{OrderID: "nan"}, acemq.Header("f", math.NaN()))
			}},
			{"infinite header at Send", `header "f"`, "+Inf", func() error {
				return pub.Send(ctxT(t), OrderPlaced{OrderID: "inf"}, acemq.Header("f", math.Inf(1)))
			}},
			{"header time after 9999 at Send", `header "t"`, "9999", func() error {
				return pub.Send(ctxT(t), OrderPlaced{OrderID: "y10k"}, acemq.Header("t", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)))
			}},
		} {
			err := tc.do()
			require.Error(t, err, tc.name)
			// The transport returns its own error, which Declare wraps;
			// Send checks the header itself.
			want := transportPrefix(url) + " "
			switch {
			case strings.HasSuffix(tc.name, "at Send"):
				want = "acemq: "
			case strings.HasPrefix(tc.name, "routing key through"):
			default:
				want = "acemq: declaring: " + want
			}
			assert.True(t, strings.HasPrefix(err.Error(), want), "%s: %v", tc.name, err)
			assert.LessOrEqual(t, countPrefix(err.Error()), 1, "%s: %v", tc.name, err)
			assert.Contains(t, err.Error(), tc.field, tc.name)
			assert.Contains(t, err.Error(), tc.limit, tc.name)
			require.NoError(t, c.Health(ctxT(t)), "Health after the %s", tc.name)
			require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: "after"}), "Send after the %s", tc.name)
		}
		_, err := c.Transport().Inspect(ctxT(t), q+".args")
		assert.ErrorIs(t, err, transport.ErrNotFound, "the queue whose argument was refused was not declared")
		info, err := c.Transport().Inspect(ctxT(t), q)
		require.NoError(t, err)
		assert.Equal(t, 8, info.Messages, "the Sends after each refusal, and nothing else")
	})
}

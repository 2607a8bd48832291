package outbox_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/outbox"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHeadersComeOutOfTheOutboxAsFromADirectPublish(t *testing.T) {
	brokers := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{name: "memory", url: func(t *testing.T) string { return acemqtest.Memory(t) }},
		{name: "rabbitmq", url: func(t *testing.T) string { return acemqtest.RabbitMQ(t) }},
	}
	headers := map[string]any{
		"x-invalid-utf8": "a\xffb\xc3",
		"x-nul":          "a\x00b",
		"x-nested":       map[string]any{"s": "\xfe", "n": int32(-7)},
		"x-list":         []any{"\x80", int64(1) << 40, []byte{0, 0xff}},
		"x-decimal":      amqp.Decimal{Scale: 2, Value: -12345},
	}
	for _, br := range brokers {
		t.Run(br.name, func(t *testing.T) {
			eachDatabase(t, func(t *testing.T, db *sql.DB, d outbox.Dialect) {
				url := br.url(t)
				o := newOutbox(t, db, d)
				c := connect(t, url)
				queue := acemqtest.QueueName(t, "outbox-headers")
				acemqtest.DeleteQueuesAfter(t, url, queue)
				col := collect(t, c, queue)
				var opts []acemq.SendOption
				for k, v := range headers {
					opts = append(opts, acemq.Header(k, v))
				}
				direct := acemq.NewPublisher[Order](c, "", queue)
				require.NoError(t, direct.Send(t.Context(), Order{ID: "direct"}, opts...))
				write(t, db, outbox.NewPublisher[Order](o, c, "", queue), opts, Order{ID: "outbox"})
				runUntilCleanup(t, outbox.NewRelay(o, c, outbox.PollInterval(fastPoll), outbox.WithLogger(quiet)).Run)
				col.waitUnique(t, 2, 10*time.Second)

				a, ok := col.byOrder("direct")
				require.True(t, ok)
				b, ok := col.byOrder("outbox")
				require.True(t, ok)
				for k := range headers {
					assert.Equal(t, a.env.Headers[k], b.env.Headers[k], "header %s", k)
				}
				assert.Equal(t, "a\xffb\xc3", b.env.Headers["x-invalid-utf8"], "the bytes changed on the way")
			})
		})
	}
}

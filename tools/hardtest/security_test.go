package hardtest_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
)

const secret = "s3cret"

// lockedBuffer is a bytes.Buffer many goroutines may write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestConnectErrorsHideThePassword dials URLs holding a password where no
// broker listens, or that do not parse: the errors never show it.
func TestConnectErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		url  string
	}{
		{"nothing listening", "amqp://user:" + secret + "@127.0.0.1:1/"},
		{"amqps, nothing listening", "amqps://user:" + secret + "@127.0.0.1:1/vhost"},
		{"an unparseable URL", "amqp://user:" + secret + "@127.0.0.1:1/%zz"},
		{"a password with escapes", "amqp://user:" + secret + "%2Fx@127.0.0.1:1/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs lockedBuffer
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := acemq.Connect(ctx, tc.url, acemq.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
			if c != nil {
				_ = c.Close()
			}
			require.Error(t, err)
			t.Logf("error: %v", err)
			assert.NotContains(t, err.Error(), secret)
			assert.NotContains(t, logs.String(), secret)
		})
	}
}

// TestOutageLogsAndHealthHideThePassword connects through a proxy with a
// URL whose password is s3cret, consumes, then cuts the proxy: the
// connection is lost and every reconnection fails. Nothing the Conn logs
// (at debug level) or Health reports meanwhile shows the password, though
// both name the URL.
func TestOutageLogsAndHealthHideThePassword(t *testing.T) {
	broker, err := url.Parse(acemqtest.RabbitMQ(t))
	require.NoError(t, err)
	user := broker.User.Username()
	pass, _ := broker.User.Password()
	p := newLoginProxy(t, broker.Host, "\x00"+user+"\x00"+secret, "\x00"+user+"\x00"+pass)
	target := *broker
	target.Host = p.addr
	target.User = url.UserPassword(user, secret)

	var logs lockedBuffer
	c := connect(t, target.String(), acemq.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	q := queue(t, broker.String(), "secret")
	cons, err := acemq.NewConsumer(c, q, func(context.Context, *acemq.Message[Order]) acemq.Ack { return acemq.Done() })
	require.NoError(t, err)
	start(t, cons)
	require.NoError(t, acemq.NewPublisher[Order](c, "", q).Send(ctxT(t), Order{ID: "1"}))
	waitFor(t, "the consumer is consuming", func() bool { return c.Health(ctxT(t)) == nil })

	p.stop()
	var health error
	waitFor(t, "a reconnection fails and Health says so", func() bool {
		health = c.Health(ctxT(t))
		return health != nil && strings.Contains(logs.String(), "connection attempt failed")
	})
	sendCtx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	sendErr := acemq.NewPublisher[Order](c, "", q).Send(sendCtx, Order{ID: "2"})
	require.NoError(t, c.Close())

	t.Logf("health: %v", health)
	t.Logf("send during the outage: %v", sendErr)
	for _, tc := range []struct {
		name, text string
	}{
		{"Health", health.Error()},
		{"Send during the outage", fmt.Sprint(sendErr)},
		{"the log", logs.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.NotContains(t, tc.text, secret)
		})
	}
	assert.Contains(t, health.Error(), "xxxxx", "Health names the URL, redacted")
	assert.Contains(t, logs.String(), "xxxxx", "the log names the URL, redacted")
}

// TestReservedNamespaceOnEveryPath checks each way an application builds an
// envelope: Header refuses a reserved name, a reserved name set with
// PublishContext.SetHeader or put in RawMessage.Envelope.Headers is dropped
// when the envelope is rendered, so the wire carries the engine's values.
func TestReservedNamespaceOnEveryPath(t *testing.T) {
	url := acemqtest.RabbitMQ(t)
	forged := map[string]any{
		"x-acemq-attempt":   int32(99),
		"x-acemq-error":     "forged",
		"X-AcEmQ-Id":        "forged",
		"x-acemq-itinerary": "forged",
	}
	c := connect(t, url, acemq.WithPublishInterceptor(func(_ context.Context, pc *acemq.PublishContext) error {
		if pc.RoutingKey == "" {
			return nil
		}
		if _, ok := pc.Payload.(Order); ok && pc.Payload.(Order).ID == "interceptor" {
			for k, v := range forged {
				pc.SetHeader(k, v)
			}
			pc.SetHeader("x-tenant", "alpha")
		}
		return nil
	}))
	q := queue(t, url, "reserved")
	require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: q}))
	reader := dialRaw(t, url)
	pub := acemq.NewPublisher[Order](c, "", q)

	for _, tc := range []struct {
		name    string
		send    func() error
		refused string // the error, when the path refuses
	}{
		{"Header refuses a reserved name", func() error {
			return pub.Send(ctxT(t), Order{}, acemq.Header("x-acemq-attempt", int32(99)))
		}, "is in the reserved namespace x-acemq-"},
		{"Header refuses it in any case", func() error {
			return pub.Send(ctxT(t), Order{}, acemq.Header("X-ACEMQ-ID", "forged"))
		}, "is in the reserved namespace x-acemq-"},
		{"Header refuses a table too big to read", func() error {
			return pub.Send(ctxT(t), Order{}, acemq.Header("x-list", make([]any, 8193)))
		}, "an array of 8193 elements, more than the 8192 an AMQP reader accepts"},
		{"PublishRaw refuses too many headers", func() error {
			h := map[string]any{}
			for i := range 8129 {
				h[fmt.Sprintf("h%d", i)] = true
			}
			return c.PublishRaw(ctxT(t), acemq.RawMessage{RoutingKey: q, ContentType: "application/json", Body: []byte(`{}`),
				Envelope: &acemq.Envelope{ID: "raw-big", Version: 1, Attempt: 1, Headers: h}})
		}, "8129 headers, more than the 8128 a message may carry"},
		{"SetHeader's reserved names are dropped", func() error {
			return pub.Send(ctxT(t), Order{ID: "interceptor"})
		}, ""},
		{"PublishRaw's reserved names are dropped", func() error {
			h := map[string]any{"x-tenant": "alpha"}
			for k, v := range forged {
				h[k] = v
			}
			return c.PublishRaw(ctxT(t), acemq.RawMessage{RoutingKey: q, ContentType: "application/json", Body: []byte(`{}`),
				Envelope: &acemq.Envelope{ID: "raw-1", Attempt: 1, Type: "Order", Version: 1, Headers: h}})
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.send()
			if tc.refused != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.refused)
				assert.Zero(t, reader.count(q), "nothing was sent")
				return
			}
			require.NoError(t, err)
			d := reader.get(q)
			assert.NotEqual(t, "forged", d.MessageId, "the engine's ID")
			assert.Equal(t, amqp.Table{"x-tenant": "alpha"}, d.Headers,
				"application headers pass; no forged name, and no attempt header on a first attempt")
			assert.Equal(t, amqp.Persistent, d.DeliveryMode)
		})
	}
}

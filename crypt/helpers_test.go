package crypt_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/crypt"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/require"
	"github.com/tink-crypto/tink-go/v2/keyset"
)

// quiet drops the warnings tests provoke on purpose.
var quiet = slog.New(slog.DiscardHandler)

// marker is what a test's payloads carry and no stored copy may show.
const marker = "PLAINTEXT-MARKER-7f3a"

// order is a test payload.
type order struct {
	Tenant string `json:"tenant"`
	Card   string `json:"card"`
	N      int    `json:"n"`
}

// broker is a place a test runs: memory:// or RabbitMQ.
type broker struct {
	name string
	url  func(t *testing.T) string
}

var brokers = []broker{
	{"memory", func(t *testing.T) string { return acemqtest.Memory(t) }},
	{"rabbitmq", func(t *testing.T) string { return acemqtest.RabbitMQ(t) }},
}

// eachBroker runs fn on memory:// and on RabbitMQ.
func eachBroker(t *testing.T, fn func(t *testing.T, url string)) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) { fn(t, b.url(t)) })
	}
}

// connect opens a Conn on url, closed when the test ends.
func connect(t *testing.T, url string, opts ...acemq.ConnOption) *acemq.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := acemq.Connect(ctx, url, append([]acemq.ConnOption{acemq.WithLogger(quiet)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newKeys is a cipher over a new keyset, and the keyset.
func newKeys(t *testing.T, opts ...crypt.Option) (*crypt.Keys, *keyset.Handle) {
	t.Helper()
	h, err := crypt.NewKeyset()
	require.NoError(t, err)
	k, err := crypt.New(h, opts...)
	require.NoError(t, err)
	return k, h
}

// settlements collects what OnSettled reports.
type settlements chan acemq.Settlement

func newSettlements() (settlements, acemq.ConnOption) {
	ch := make(settlements, 4096)
	return ch, acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { ch <- s })
}

func (ch settlements) next(t *testing.T) acemq.Settlement {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no settlement within 20s")
		return acemq.Settlement{}
	}
}

// run starts c.Run and stops it when the test ends.
func run(t *testing.T, c interface{ Run(context.Context) error }) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, acemq.ErrClosed) {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its ctx ending")
		}
	})
}

// get waits for a message on queue, takes it and acks it.
func get(t *testing.T, c *acemq.Conn, queue string) transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		d, ok, err := c.Transport().Get(ctx, queue)
		require.NoError(t, err)
		if ok {
			require.NoError(t, d.Ack())
			return d
		}
		select {
		case <-ctx.Done():
			t.Fatalf("nothing arrived on %s within 20s", queue)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// consumerQueue declares a consumer's queues for a test, deleted after it.
func consumerQueue(t *testing.T, url, base string) string {
	t.Helper()
	q := acemqtest.QueueName(t, base)
	acemqtest.DeleteQueuesAfter(t, url, q)
	return q
}

// keysetHandle is Tink's keyset handle.
type keysetHandle = keyset.Handle

func itoa(id uint32) string { return strconv.FormatUint(uint64(id), 10) }

// getNoAck waits for a message on queue and takes it, unsettled.
func getNoAck(t *testing.T, c *acemq.Conn, queue string) transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		d, ok, err := c.Transport().Get(ctx, queue)
		require.NoError(t, err)
		if ok {
			return d
		}
		select {
		case <-ctx.Done():
			t.Fatalf("nothing arrived on %s within 20s", queue)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

// newKeysetB is a cipher over a new keyset, for benchmarks.
func newKeysetB(testing.TB) (*crypt.Keys, error) {
	h, err := crypt.NewKeyset()
	if err != nil {
		return nil, err
	}
	return crypt.New(h)
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

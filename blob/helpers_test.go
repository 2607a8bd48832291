package blob_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/blob"
	"github.com/stretchr/testify/require"
)

// quiet drops the warnings tests provoke on purpose.
var quiet = slog.New(slog.DiscardHandler)

// fastRetry is a ladder short enough for tests.
var fastRetry = acemq.RetryPolicy{MaxAttempts: 3, Delays: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}}

// broker is a place a test runs: memory:// or RabbitMQ.
type broker struct {
	name string
	url  func(t *testing.T) string
}

var brokers = []broker{
	{"memory", func(t *testing.T) string { return acemqtest.Memory(t) }},
	{"rabbitmq", func(t *testing.T) string { return acemqtest.RabbitMQ(t) }},
}

// storeKind is a Store a test runs on.
type storeKind struct {
	name string
	new  func(t *testing.T) blob.Store
}

var stores = []storeKind{
	{"memory", func(*testing.T) blob.Store { return blob.Memory() }},
	{"dir", newDir},
	{"sqlite", func(t *testing.T) blob.Store { return newSQLStore(t, openSQLite(t), blob.SQLite) }},
	{"postgres", func(t *testing.T) blob.Store { return newSQLStore(t, openPostgres(t), blob.Postgres) }},
}

// manyPlaces are where the heaviest tests run: each store once, on a
// broker (every store on every broker would double their time for
// nothing: the store and the broker meet only through the Ref).
var manyPlaces = []struct {
	broker broker
	store  storeKind
}{
	{brokers[0], stores[0]},
	{brokers[1], stores[1]},
	{brokers[1], stores[3]},
}

func newDir(t *testing.T) blob.Store {
	t.Helper()
	s, err := blob.Dir(t.TempDir())
	require.NoError(t, err)
	return s
}

// eachPlace runs fn for every broker and store.
func eachPlace(t *testing.T, fn func(t *testing.T, url string, s blob.Store)) {
	t.Helper()
	for _, b := range brokers {
		for _, sk := range stores {
			t.Run(b.name+"/"+sk.name, func(t *testing.T) {
				fn(t, b.url(t), sk.new(t))
			})
		}
	}
}

func connect(t testing.TB, url string, opts ...acemq.ConnOption) *acemq.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := acemq.Connect(ctx, url, append([]acemq.ConnOption{acemq.WithLogger(quiet)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// queue is a queue name of the test's own, deleted after it on RabbitMQ.
func queue(t *testing.T, url, base string) string {
	t.Helper()
	q := acemqtest.QueueName(t, base)
	acemqtest.DeleteQueuesAfter(t, url, q, acemq.RetryQueue(q, 10*time.Millisecond), acemq.RetryQueue(q, 20*time.Millisecond))
	return q
}

// payload is size bytes generated from seed: the same seed gives the same
// bytes, so a test checks a digest without keeping the bytes. It copies
// from a table of random bytes, at an offset the seed picks, so that
// generating gigabytes costs little next to what is measured.
func payload(seed uint64, size int64) io.Reader {
	return io.LimitReader(&generator{pos: int64(seed * 1_000_003 % uint64(len(table)))}, size)
}

// table is the random bytes payloads are cut from: 1 MiB and 7 bytes, so
// that a chunk of any power-of-two size never repeats its neighbour.
var table = func() []byte {
	b := make([]byte, 1<<20+7)
	r := rand.NewChaCha8([32]byte{'a', 'c', 'e', 'm', 'q'})
	_, _ = r.Read(b)
	return b
}()

type generator struct{ pos int64 }

func (g *generator) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], table[g.pos:])
		n += k
		g.pos = (g.pos + int64(k)) % int64(len(table))
	}
	return n, nil
}

// digest is the hex SHA-256 of payload(seed, size).
func digest(t testing.TB, seed uint64, size int64) string {
	t.Helper()
	h := sha256.New()
	_, err := io.Copy(h, payload(seed, size))
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// meta is the metadata most tests send.
type meta struct {
	Name string `json:"name"`
	Seed uint64 `json:"seed"`
}

// settlements collects what OnSettled reports.
type settlements chan acemq.Settlement

func newSettlements() (settlements, acemq.ConnOption) {
	ch := make(settlements, 4096)
	return ch, acemq.OnSettled(func(_ context.Context, s acemq.Settlement) { ch <- s })
}

func (ch settlements) next(t *testing.T, within time.Duration) acemq.Settlement {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(within):
		t.Fatalf("no settlement within %s", within)
		return acemq.Settlement{}
	}
}

// run runs a consumer until the test ends.
func run[T any](t *testing.T, c *acemq.Conn, q string, h acemq.Handler[T], opts ...acemq.ConsumerOption) {
	t.Helper()
	cons, err := acemq.NewConsumer(c, q, h, append([]acemq.ConsumerOption{acemq.WithConsumerRetry(fastRetry)}, opts...)...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// ids lists the objects in s (every one, expired or not).
func ids(t *testing.T, s blob.Store) []string {
	t.Helper()
	var out []string
	for id, err := range s.Expired(t.Context(), time.Now().Add(100*365*24*time.Hour)) {
		require.NoError(t, err)
		out = append(out, id)
	}
	return out
}

// scaled is full, or small under -short. The heavy tests (a 1 GiB
// payload, 200 payloads with retries, a consumer SIGKILLed mid-read) keep
// their promise at a smaller size under -short (make test-unit, with
// -race) and run at full size without it (make test-large, without
// -race; run that under flock /tmp/acemq-heavy.lock).
func scaled[N int | int64](t *testing.T, full, small N) N {
	t.Helper()
	if testing.Short() {
		t.Logf("-short: %v instead of %v", small, full)
		return small
	}
	return full
}

var _ = strings.Contains
var _ = os.Getenv
var _ atomic.Int64

package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// fenceLog records, per handled message, the fence it carried.
type fenceLog struct {
	mu     sync.Mutex
	runs   []Step
	fences []uint64
}

func (l *fenceLog) add(m *acemq.Message[Step]) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, m.Payload)
	l.fences = append(l.fences, m.Fence())
	return len(l.runs)
}

func (l *fenceLog) snapshot() ([]Step, []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Step(nil), l.runs...), append([]uint64(nil), l.fences...)
}

// blockKey starts an ordered consumer of one partition with BlockOnFailure
// whose handler is h, publishes k's messages 1…n, and waits until k is
// blocked by message 10 (h must fail it) with the rest held.
func blockKey(t *testing.T, url string, c *acemq.Conn, q string, n int, h acemq.Handler[Step]) {
	t.Helper()
	cons, err := acemq.NewConsumer(c, q, h,
		acemq.Ordered(acemq.OrderPolicy{Partitions: 1, BlockOnFailure: true}), acemq.Concurrency(2))
	require.NoError(t, err)
	run(t, cons)
	var ms []transport.Message
	for i := 1; i <= n; i++ {
		ms = append(ms, keyed(t, q, Step{Key: "k", N: i}))
	}
	publishAll(t, c, ms)
	within(t, 30*time.Second, "k blocked with its held messages", func() bool {
		keys, err := acemq.BlockedKeys(ctxT(t), c, q)
		require.NoError(t, err)
		return len(keys) == 1 && keys[0].Held == n-10
	})
}

// TestReleasedMessagesCarryTheHoldersFence (issue 37 item 1): the message
// a release re-runs and the held ones it runs after carry the token of the
// partition's holder, like every other delivery of the partition (they
// carried 0, which a fence-checked store refuses).
func TestReleasedMessagesCarryTheHoldersFence(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		q := orderedQueue(t, url, 1, "k")
		c := connectURL(t, url, acemq.WithRetryPolicy(inPlace))
		var failing atomic.Bool
		failing.Store(true)
		var seen fenceLog
		blockKey(t, url, c, q, 20, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
			seen.add(m)
			if m.Payload.N == 10 && failing.Load() {
				return acemq.Reject(errors.New("customer 42 does not exist"))
			}
			return acemq.Done()
		})
		failing.Store(false)
		require.NoError(t, acemq.ReleaseKey(ctxT(t), c, q, "k", acemq.RerunFailed()))
		within(t, 30*time.Second, "the released messages handled", func() bool {
			runs, _ := seen.snapshot()
			return len(runs) == 21
		})
		runs, fences := seen.snapshot()
		require.NotZero(t, fences[0])
		for i, r := range runs {
			require.Equal(t, fences[0], fences[i], "message %d (run %d) carries the holder's fence", r.N, i+1)
		}
		require.Equal(t, 10, runs[10].N, "the re-run message ran first")
	})
}

// TestFencedRefusalBacksOff (issue 37 item 1): a handler whose every write
// is refused for its fence (it answers ErrPartitionLost while this
// instance still holds the partition) is not run in a loop: the partition
// is taken again with a pause that doubles, the first refusal of the row
// is logged at Warn (and no other), and each one is counted on
// acemq.consumer.fenced.total. Both for a delivery of the partition and
// for a message a release runs.
func TestFencedRefusalBacksOff(t *testing.T) {
	t.Parallel()
	const watch = 3 * time.Second
	// Pauses of 50, 100, 200, 400, 800 and 1600 ms fit 6 or 7 runs in 3 s;
	// a hot loop ran hundreds of thousands.
	const most = 12
	refuse := func(m *acemq.Message[Step]) acemq.Ack {
		return acemq.Retry(fmt.Errorf("account %s: the row holds a newer fence than %d: %w", m.Payload.Key, m.Fence(), acemq.ErrPartitionLost))
	}
	setup := func(t *testing.T, url string) (*acemq.Conn, *sdkmetric.ManualReader, *levelLog) {
		reader := sdkmetric.NewManualReader()
		logs := &levelLog{}
		c := connectURL(t, url, acemq.WithRetryPolicy(inPlace), acemq.WithLogger(slog.New(logs)),
			acemq.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
		return c, reader, logs
	}
	check := func(t *testing.T, runs int64, reader *sdkmetric.ManualReader, logs *levelLog, q string) {
		t.Helper()
		require.GreaterOrEqual(t, runs, int64(2), "the refused message is tried again")
		require.LessOrEqual(t, runs, int64(most), "the refused message is tried again with a growing pause, not in a loop")
		var warned []string
		for _, line := range logs.atLeast(slog.LevelWarn) {
			if strings.Contains(line, "fencing token") {
				warned = append(warned, line)
			}
		}
		require.Len(t, warned, 1, "the first refusal of the row is logged at Warn, the others at Debug")
		var counted float64
		for attrs, n := range points(t, reader, "acemq.consumer.fenced.total") {
			if strings.Contains(attrs, q) {
				counted += n
			}
		}
		require.GreaterOrEqual(t, counted, float64(runs-1), "each refusal is counted")
	}
	t.Run("partition", func(t *testing.T) {
		t.Parallel()
		onBrokers(t, func(t *testing.T, url string) {
			q := orderedQueue(t, url, 1)
			c, reader, logs := setup(t, url)
			var runs atomic.Int64
			cons, err := acemq.NewConsumer(c, q, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
				runs.Add(1)
				return refuse(m)
			}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1}))
			require.NoError(t, err)
			run(t, cons)
			publishAll(t, c, []transport.Message{keyed(t, q, Step{Key: "k", N: 1})})
			time.Sleep(watch)
			check(t, runs.Load(), reader, logs, q)
		})
	})
	t.Run("release", func(t *testing.T) {
		t.Parallel()
		onBrokers(t, func(t *testing.T, url string) {
			q := orderedQueue(t, url, 1, "k")
			c, reader, logs := setup(t, url)
			var runs atomic.Int64
			var released atomic.Bool
			blockKey(t, url, c, q, 12, func(_ context.Context, m *acemq.Message[Step]) acemq.Ack {
				switch {
				case !released.Load() && m.Payload.N == 10:
					return acemq.Reject(errors.New("customer 42 does not exist"))
				case released.Load() && m.Payload.N == 10:
					runs.Add(1)
					return refuse(m)
				}
				return acemq.Done()
			})
			released.Store(true)
			require.NoError(t, acemq.ReleaseKey(ctxT(t), c, q, "k", acemq.RerunFailed()))
			time.Sleep(watch)
			check(t, runs.Load(), reader, logs, q)
			keys, err := acemq.BlockedKeys(ctxT(t), c, q)
			require.NoError(t, err)
			require.Len(t, keys, 1, "the key stays blocked while the re-run message is refused")
		})
	})
}

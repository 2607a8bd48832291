package acemq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/transport"
)

// levelLog is a slog handler that keeps the level and text of every record.
type levelLog struct {
	mu    sync.Mutex
	lines []levelLine
}

type levelLine struct {
	level slog.Level
	text  string
}

func (l *levelLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *levelLog) Handle(_ context.Context, r slog.Record) error {
	text := r.Message
	r.Attrs(func(a slog.Attr) bool { text += " " + a.String(); return true })
	l.mu.Lock()
	l.lines = append(l.lines, levelLine{r.Level, text})
	l.mu.Unlock()
	return nil
}
func (l *levelLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *levelLog) WithGroup(string) slog.Handler      { return l }

// atLeast returns the texts of the records at level or above.
func (l *levelLog) atLeast(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ln := range l.lines {
		if ln.level >= level {
			out = append(out, ln.level.String()+" "+ln.text)
		}
	}
	return out
}

// TestCloseLogsNoWarning (issue 32 item 4): a Close, or a Shutdown whose
// ctx ends while handlers still run, with a plain consumer whose handlers
// ask for a retry once their ctx ends (the move then fails: the Conn is
// closing) and an ordered consumer holding its slots, whose handlers ask
// for a retry in place and a rejection (its move fails too), logs nothing
// at Warn or above. What the caller asked for is not a warning; the same lines
// stay at Debug.
func TestCloseLogsNoWarning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		stop func(c *acemq.Conn) error
	}{
		{"Close", func(c *acemq.Conn) error { return c.Close() }},
		{"Shutdown past its ctx", func(c *acemq.Conn) error {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			err := c.Shutdown(ctx)
			if errors.Is(err, context.DeadlineExceeded) {
				return nil
			}
			return fmt.Errorf("Shutdown = %v, want its ctx's DeadlineExceeded", err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			onBrokers(t, func(t *testing.T, url string) {
				logs := &levelLog{}
				c := connectURL(t, url, acemq.WithLogger(slog.New(logs)), acemq.WithRetryPolicy(fastRetry))
				plainQ := consumerQueue(t, url, fastRetry)
				ordQ := orderedQueue(t, url, 2)

				running := make(chan string, 16)
				wait := func(ctx context.Context, what string) {
					running <- what
					<-ctx.Done()
				}
				plain, err := acemq.NewConsumer(c, plainQ, func(ctx context.Context, _ *acemq.Message[OrderPlaced]) acemq.Ack {
					wait(ctx, "plain")
					return acemq.Retry(ctx.Err())
				}, acemq.Concurrency(2))
				require.NoError(t, err)
				// One ordered handler asks for a retry (in place), the other
				// rejects (a move to .dlq, which fails: the Conn is closing).
				ordered, err := acemq.NewConsumer(c, ordQ, func(ctx context.Context, m *acemq.Message[Step]) acemq.Ack {
					wait(ctx, "ordered")
					if m.Payload.Key == "a" {
						return acemq.Retry(ctx.Err())
					}
					return acemq.Reject(ctx.Err())
				}, acemq.Ordered(acemq.OrderPolicy{Partitions: 2}), acemq.Concurrency(2))
				require.NoError(t, err)
				runs := startRuns(t, plain, ordered)

				pub := acemq.NewPublisher[OrderPlaced](c, "", plainQ)
				for i := range 2 {
					require.NoError(t, pub.Send(ctxT(t), OrderPlaced{OrderID: fmt.Sprint(i)}))
				}
				publishAll(t, c, []transport.Message{keyed(t, ordQ, Step{Key: "a"}), keyed(t, ordQ, Step{Key: "b"})})
				seen := map[string]int{}
				for seen["plain"] < 2 || seen["ordered"] < 2 {
					select {
					case what := <-running:
						seen[what]++
					case <-time.After(30 * time.Second):
						t.Fatalf("handlers running after 30s: %v", seen)
					}
				}
				require.Empty(t, logs.atLeast(slog.LevelWarn), "before the Conn stops")

				require.NoError(t, tc.stop(c))
				for _, err := range runs() {
					require.ErrorIs(t, err, acemq.ErrClosed)
				}
				assert.Empty(t, logs.atLeast(slog.LevelWarn), "logged at Warn or above while the Conn stopped as asked")
				t.Logf("%d lines in all, %d at Debug", len(logs.lines), len(logs.lines)-len(logs.atLeast(slog.LevelInfo)))
			})
		})
	}
}

// TestCloseStartsNoOrderedHandler (issue 32 item 4): once Close has ended
// the handlers' contexts, an ordered consumer starts no handler, whatever
// its lanes hold ready: the deliveries go back to their partition. With
// one worker, the only handler that may ever run is the first, which
// holds the worker until Close ends its ctx; each round closes while nine
// more keys wait ready behind it.
func TestCloseStartsNoOrderedHandler(t *testing.T) {
	t.Parallel()
	onBrokers(t, func(t *testing.T, url string) {
		rounds := 25
		if transportPrefix(url) == "rabbitmq:" {
			rounds = 3
		}
		for round := range rounds {
			c := connectURL(t, url)
			q := orderedQueue(t, url, 1)
			var calls, late atomic.Int32
			first := make(chan struct{})
			cons, err := acemq.NewConsumer(c, q, func(ctx context.Context, _ *acemq.Message[Step]) acemq.Ack {
				if calls.Add(1) == 1 {
					close(first)
				}
				if ctx.Err() != nil {
					late.Add(1)
				}
				<-ctx.Done()
				return acemq.Retry(ctx.Err())
			}, acemq.Ordered(acemq.OrderPolicy{Partitions: 1}), acemq.Concurrency(1))
			require.NoError(t, err)
			runs := startRuns(t, cons)
			var ms []transport.Message
			for k := range 10 {
				ms = append(ms, keyed(t, q, Step{Key: fmt.Sprint("k", k)}))
			}
			publishAll(t, c, ms)
			select {
			case <-first:
			case <-time.After(30 * time.Second):
				t.Fatal("no handler ran within 30s")
			}
			// The other nine are in the lanes, ready, once the partition's
			// prefetch brought them.
			time.Sleep(20 * time.Millisecond)
			require.NoError(t, c.Close())
			for _, err := range runs() {
				require.ErrorIs(t, err, acemq.ErrClosed)
			}
			require.Equal(t, int32(1), calls.Load(), "round %d: handlers started, the first included; %d of them with their ctx ended", round, late.Load())
		}
	})
}

// startRuns starts Run of each of rs and returns a function that waits
// for them all (10s at most) and returns what they returned.
func startRuns(t *testing.T, rs ...runner) func() []error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, len(rs))
	for _, r := range rs {
		go func() { done <- r.Run(ctx) }()
	}
	var once sync.Once
	var errs []error
	return func() []error {
		once.Do(func() {
			for range rs {
				select {
				case err := <-done:
					errs = append(errs, err)
				case <-time.After(10 * time.Second):
					t.Fatal("Run did not return within 10s")
				}
			}
		})
		return slices.Clone(errs)
	}
}

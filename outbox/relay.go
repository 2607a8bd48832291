package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/acemq/acemq"
)

// Relay defaults.
const (
	DefaultBatchSize    = 256
	DefaultWindow       = 256
	DefaultPollInterval = 500 * time.Millisecond
	DefaultLease        = 30 * time.Second
	DefaultMinBackoff   = time.Second
	DefaultMaxBackoff   = 5 * time.Minute
)

// RelayOption configures a Relay.
type RelayOption interface{ applyRelay(*relayConfig) }

type relayOptionFunc func(*relayConfig)

func (f relayOptionFunc) applyRelay(c *relayConfig) { f(c) }

type relayConfig struct {
	batch      int
	window     int
	poll       time.Duration
	lease      time.Duration
	minBackoff time.Duration
	maxBackoff time.Duration
	logger     *slog.Logger
	errs       []error
}

// BatchSize sets how many due rows a Relay claims at a time (default 256).
// A full batch is followed at once by the next; a short one by a poll
// interval's wait. n must be from 1 to 10,000.
func BatchSize(n int) RelayOption {
	return relayOptionFunc(func(c *relayConfig) {
		if n < 1 || n > 10_000 {
			c.errs = append(c.errs, fmt.Errorf("acemq: outbox: BatchSize(%d) is outside 1 to 10000", n))
			return
		}
		c.batch = n
	})
}

// Window sets how many publishes of a batch are awaiting their confirm at
// once (default 256). n must be at least 1.
func Window(n int) RelayOption {
	return relayOptionFunc(func(c *relayConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("acemq: outbox: Window(%d) is below 1", n))
			return
		}
		c.window = n
	})
}

// PollInterval sets how long a Relay waits after a batch that was not full
// before it looks again (default 500ms). It bounds how late a scheduled or
// newly committed row goes out. d must be positive.
func PollInterval(d time.Duration) RelayOption {
	return relayOptionFunc(func(c *relayConfig) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("acemq: outbox: PollInterval(%v) is not positive", d))
			return
		}
		c.poll = d
	})
}

// Lease sets how long a claimed row stays invisible to other relays
// (default 30s). A relay that dies mid-batch leaves its rows to be claimed
// again once the lease ends; a live relay gives up on a batch's publishes
// after half the lease, so two relays never hold one row at once. d must
// be at least 100ms.
func Lease(d time.Duration) RelayOption {
	return relayOptionFunc(func(c *relayConfig) {
		if d < 100*time.Millisecond {
			c.errs = append(c.errs, fmt.Errorf("acemq: outbox: Lease(%v) is below 100ms", d))
			return
		}
		c.lease = d
	})
}

// Backoff sets the bounds of the delay before a row whose publish failed is
// tried again: minimum after the first failure, doubling with each one,
// capped at maximum (defaults 1s and 5m). 0 < minimum <= maximum.
func Backoff(minimum, maximum time.Duration) RelayOption {
	return relayOptionFunc(func(c *relayConfig) {
		if minimum <= 0 || maximum < minimum {
			c.errs = append(c.errs, fmt.Errorf("acemq: outbox: Backoff(%v, %v) wants 0 < minimum <= maximum", minimum, maximum))
			return
		}
		c.minBackoff, c.maxBackoff = minimum, maximum
	})
}

// WithLogger sets where a Relay reports failed publishes and database
// errors (default slog.Default()).
func WithLogger(l *slog.Logger) RelayOption {
	return relayOptionFunc(func(c *relayConfig) {
		if l == nil {
			c.errs = append(c.errs, errors.New("acemq: outbox: WithLogger was given nil"))
			return
		}
		c.logger = l
	})
}

// Relay publishes an Outbox's due rows through a Conn and deletes each one
// once the broker confirmed it. Several relays may run on one PostgreSQL
// table; on SQLite run one.
type Relay struct {
	o    *Outbox
	c    *acemq.Conn
	cfg  relayConfig
	err  error
	sqls relaySQL
}

// NewRelay returns a Relay of o's rows through c. Invalid options, or a nil
// o or c, make Run return an error at once.
func NewRelay(o *Outbox, c *acemq.Conn, opts ...RelayOption) *Relay {
	r := &Relay{o: o, c: c, cfg: relayConfig{
		batch: DefaultBatchSize, window: DefaultWindow, poll: DefaultPollInterval, lease: DefaultLease,
		minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff, logger: slog.Default(),
	}}
	for _, opt := range opts {
		if opt == nil {
			r.cfg.errs = append(r.cfg.errs, errors.New("acemq: outbox: NewRelay was given a nil option"))
			continue
		}
		opt.applyRelay(&r.cfg)
	}
	switch {
	case o == nil:
		r.err = errors.New("acemq: outbox: NewRelay was given a nil Outbox")
	case c == nil:
		r.err = fmt.Errorf("acemq: outbox: NewRelay of table %s was given a nil Conn", o.table)
	default:
		r.err = errors.Join(r.cfg.errs...)
		r.sqls = newRelaySQL(o)
	}
	return r
}

// Run relays until ctx ends, then returns nil. It claims due rows in id
// order, up to BatchSize at a time, publishes them concurrently through
// Conn.PublishRaw (no interceptors run: each message goes out with the
// envelope, trace context included, stored when it was written), deletes
// the confirmed ones and pushes each failed one back by the backoff. A
// database error is logged and retried after the poll interval. Run
// returns an error for invalid options or when the Conn is closed.
func (r *Relay) Run(ctx context.Context) error {
	if r.err != nil {
		return r.err
	}
	wait := time.NewTimer(r.cfg.poll)
	wait.Stop()
	defer wait.Stop()
	for {
		n, err := r.relayBatch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case errors.Is(err, acemq.ErrClosed):
			return fmt.Errorf("acemq: outbox: relay of table %s stopped: %w", r.o.table, err)
		case err != nil:
			r.cfg.logger.WarnContext(ctx, "acemq: outbox: relay batch failed; retrying after the poll interval",
				slog.String("table", r.o.table), slog.Any("error", err))
		case n == r.cfg.batch:
			continue // more may be due
		}
		wait.Reset(r.cfg.poll)
		select {
		case <-ctx.Done():
			return nil
		case <-wait.C:
		}
	}
}

// backoff is the delay before the attempt after the given number of
// failures: minimum, doubling, capped.
func (r *Relay) backoff(failures int) time.Duration {
	d := r.cfg.minBackoff
	for i := 1; i < failures && d < r.cfg.maxBackoff; i++ {
		d *= 2
	}
	return min(d, r.cfg.maxBackoff)
}

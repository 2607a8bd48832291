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
	DefaultMaxAttempts  = 20
	DefaultStopTimeout  = 5 * time.Second
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
	// maxAttempts is the failures after which a row is dead-lettered.
	maxAttempts int
	stopTimeout time.Duration
	logger      *slog.Logger
	errs        []error
}

// BatchSize sets how many due rows a Relay claims at a time (default 256).
// A full batch is followed at once by the next; a short one by a poll
// interval's wait. n must be from 1 to 10,000.
func BatchSize(n int) RelayOption {
	return relayOptionFunc(func(c *relayConfig) {
		if n < 1 || n > 10_000 {
			c.errs = append(c.errs, fmt.Errorf("outbox: BatchSize(%d) is outside 1 to 10000", n))
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
			c.errs = append(c.errs, fmt.Errorf("outbox: Window(%d) is below 1", n))
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
			c.errs = append(c.errs, fmt.Errorf("outbox: PollInterval(%v) is not positive", d))
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
			c.errs = append(c.errs, fmt.Errorf("outbox: Lease(%v) is below 100ms", d))
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
			c.errs = append(c.errs, fmt.Errorf("outbox: Backoff(%v, %v) wants 0 < minimum <= maximum", minimum, maximum))
			return
		}
		c.minBackoff, c.maxBackoff = minimum, maximum
	})
}

// MaxAttempts sets how many failed publishes dead-letter a row (default
// 20, which with the default backoff is about an hour of trying). A dead
// row stays in the table with dead_at set, out of every relay's way, is
// counted by the acemq.outbox.dead gauge and Outbox.Dead, and comes back
// with Outbox.Replay or `acemq outbox replay`. n must be at least 1; a
// row that already failed n times dies at its next failure.
func MaxAttempts(n int) RelayOption {
	return relayOptionFunc(func(c *relayConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("outbox: MaxAttempts(%d) is below 1", n))
			return
		}
		c.maxAttempts = n
	})
}

// StopTimeout sets how long a Relay whose ctx ended waits for the
// publishes of its batch that are awaiting their confirm (default 5s), so
// that what the broker took is deleted rather than handed back and sent
// again. Publishes not yet started when ctx ends are never started; those
// still unconfirmed when d has passed are handed back. The wait never runs
// past half the lease. d must not be negative; 0 hands back at once.
func StopTimeout(d time.Duration) RelayOption {
	return relayOptionFunc(func(c *relayConfig) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("outbox: StopTimeout(%v) is negative", d))
			return
		}
		c.stopTimeout = d
	})
}

// WithLogger sets where a Relay reports failed publishes and database
// errors (default: the Conn's logger, acemq.WithLogger's or
// slog.Default()).
func WithLogger(l *slog.Logger) RelayOption {
	return relayOptionFunc(func(c *relayConfig) {
		if l == nil {
			c.errs = append(c.errs, errors.New("outbox: WithLogger was given nil"))
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
	// hook, set by tests only, runs before each try of a settle
	// statement with what it does ("delete", "release", "push back").
	hook func(what string)
}

// NewRelay returns a Relay of o's rows through c. Invalid options, or a nil
// o or c, make Run return an error at once.
func NewRelay(o *Outbox, c *acemq.Conn, opts ...RelayOption) *Relay {
	r := &Relay{o: o, c: c, cfg: relayConfig{
		batch: DefaultBatchSize, window: DefaultWindow, poll: DefaultPollInterval, lease: DefaultLease,
		minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff, maxAttempts: DefaultMaxAttempts,
		stopTimeout: DefaultStopTimeout,
	}}
	for _, opt := range opts {
		if opt == nil {
			r.cfg.errs = append(r.cfg.errs, errors.New("outbox: NewRelay was given a nil option"))
			continue
		}
		opt.applyRelay(&r.cfg)
	}
	switch {
	case o == nil:
		r.err = errors.New("outbox: NewRelay was given a nil Outbox")
	case c == nil:
		r.err = fmt.Errorf("outbox: NewRelay of table %s was given a nil Conn", o.table)
	default:
		r.err = errors.Join(r.cfg.errs...)
		r.sqls = newRelaySQL(o)
	}
	if r.cfg.logger == nil {
		r.cfg.logger = c.Logger() // WithLogger's, or slog.Default(); also for a nil c
	}
	return r
}

// Run relays until ctx ends, then returns nil. It claims due rows in
// due_at order, up to BatchSize at a time, publishes them concurrently
// through Conn.PublishRaw (no interceptors run: each message goes out with
// the envelope, trace context included, stored when it was written),
// deletes the confirmed ones and pushes each failed one back by the
// backoff, dead-lettering it after MaxAttempts failures. A database error
// is logged and retried after the poll interval. Run returns an error for
// invalid options or when the Conn is closed.
//
// When ctx ends, Run finishes the batch in hand: it starts no further
// publish, waits up to StopTimeout for the confirms outstanding, deletes
// what was confirmed and hands the rest back at once, so another relay can
// take it without waiting for the lease.
func (r *Relay) Run(ctx context.Context) error {
	if r.err != nil {
		return r.err
	}
	wait := time.NewTimer(r.cfg.poll)
	wait.Stop()
	defer wait.Stop()
	for ctx.Err() == nil {
		n, err := r.relayBatch(ctx)
		closed := errors.Is(err, acemq.ErrClosed)
		if err != nil && !closed {
			msg := "acemq: outbox: relay batch failed; retrying after the poll interval"
			if ctx.Err() != nil {
				msg = "acemq: outbox: the last batch of a stopping relay failed; its rows wait for their lease"
			}
			r.cfg.logger.WarnContext(context.WithoutCancel(ctx), msg, slog.String("table", r.o.table), slog.Any("error", err))
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case closed:
			return fmt.Errorf("outbox: relay of table %s stopped: %w", r.o.table, err)
		case err != nil:
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
	return nil
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

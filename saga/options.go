package saga

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/outbox"
	"go.opentelemetry.io/otel/metric"
)

// DefaultInboxKeep is how long the inbox remembers a handled message
// unless InboxKeep says otherwise: a copy that arrives within it is acked
// and changes nothing.
const DefaultInboxKeep = 7 * 24 * time.Hour

// Option configures a Saga (New).
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	meterProvider metric.MeterProvider
	inbox         *outbox.Inbox
	keep          time.Duration
	logger        *slog.Logger
	cipher        acemq.BodyCipher // cipher.go
	errs          []error
}

// WithLogger sets where the saga's handlers log what the consumer's
// settlement alone would not show: a step that panicked (with its stack)
// and a missing table. The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.errs = append(c.errs, errors.New("WithLogger was given nil"))
			return
		}
		c.logger = l
	})
}

// WithMeterProvider sets where the saga's instruments are created. The
// default is the outbox's (outbox.Outbox.MeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp == nil {
			c.errs = append(c.errs, errors.New("WithMeterProvider was given nil"))
			return
		}
		c.meterProvider = mp
	})
}

// WithInbox sets the inbox in which handled messages are claimed. It must
// live in the outbox's database, since the claim is written in the step's
// transaction. The default is outbox.NewInbox over the outbox's database,
// in the table acemq_inbox, which Saga.Migrate creates. Sagas sharing an
// inbox do not mix their claims: a claim's key is the saga's name and the
// message's ID.
func WithInbox(in *outbox.Inbox) Option {
	return optionFunc(func(c *config) {
		if in == nil {
			c.errs = append(c.errs, errors.New("WithInbox was given nil"))
			return
		}
		c.inbox = in
	})
}

// InboxKeep sets how long a handled message is remembered (default
// DefaultInboxKeep): a redelivery within it is acked and changes nothing;
// one after it runs its step again. Keep it longer than any message can
// take to come back (the retry ladder, an outbox relay resending after a
// crash, a replay from a dead-letter queue). Purge expired claims with
// outbox.Inbox.Purge. d must be positive.
func InboxKeep(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("InboxKeep was given %v; want a positive duration", d))
			return
		}
		c.keep = d
	})
}

// HandleOption configures a handler made by Handle.
type HandleOption interface{ applyHandle(*handleConfig) }

type handleOptionFunc func(*handleConfig)

func (f handleOptionFunc) applyHandle(c *handleConfig) { f(c) }

type handleConfig struct {
	starts bool
}

// Starts lets the handler's messages create an instance: a message whose
// correlation ID has no instance runs the step on a zero S, with
// Instance.New true. Without it such a message is rejected, with the
// reason `no saga "checkout" with correlation ID "o-42"`.
func Starts() HandleOption {
	return handleOptionFunc(func(c *handleConfig) { c.starts = true })
}

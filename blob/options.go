package blob

import (
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq"
	"go.opentelemetry.io/otel/metric"
)

// Option configures a Publisher, Put or WithClaimCheck.
type Option interface{ apply(*config) }

// HandleOption configures Handle.
type HandleOption interface{ applyHandle(*handleConfig) }

type config struct {
	expiry      time.Duration
	contentType string
	mp          metric.MeterProvider
	errs        []error
}

type handleConfig struct {
	deleteOnDone bool
	mp           metric.MeterProvider
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type handleOptionFunc func(*handleConfig)

func (f handleOptionFunc) applyHandle(c *handleConfig) { f(c) }

// InspectionTime is what the default expiry adds to the retry ladder's
// total delay: how long a message's object outlives the message's last
// retry, so that it can still be read from {queue}.dlq or {queue}.parked
// and replayed. 7 days.
const InspectionTime = 7 * 24 * time.Hour

// DefaultExpiry is how long an object is kept unless Expiry says
// otherwise: the total delay of the retry ladder p (every delay before
// attempts 2 to MaxAttempts, the consumer's worst case before the message
// is dead-lettered) plus InspectionTime. Zero fields of p take
// acemq.DefaultRetryPolicy's values, as a consumer does. For the default
// policy (5 attempts, 1s, 5s, 30s, 2m) it is 7 days, 2 minutes and 36
// seconds.
func DefaultExpiry(p acemq.RetryPolicy) time.Duration {
	def := acemq.DefaultRetryPolicy()
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = def.MaxAttempts
	}
	if len(p.Delays) == 0 {
		p.Delays = def.Delays
	}
	var total time.Duration
	for a := 2; a <= p.MaxAttempts; a++ {
		total += p.Delays[min(a-2, len(p.Delays)-1)]
	}
	return total + InspectionTime
}

// Expiry sets how long the stored object stays readable after it is
// stored. The default is DefaultExpiry(acemq.DefaultRetryPolicy()); give
// ForPolicy instead when the consumers use another ladder. An object must
// outlive every retry and the time its message may wait in .dlq or
// .parked: a shorter expiry sends a replayed message to .dlq as gone. d
// must be positive.
func Expiry(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("Expiry(%s): want a positive duration", d))
			return
		}
		c.expiry = d
	})
}

// ForPolicy sets the expiry to DefaultExpiry(p): the consumers' retry
// ladder p plus InspectionTime.
func ForPolicy(p acemq.RetryPolicy) Option {
	return optionFunc(func(c *config) { c.expiry = DefaultExpiry(p) })
}

// ContentType sets the Ref's ContentType, what the stored bytes are (a
// Publisher's Send). The default is application/octet-stream.
func ContentType(ct string) Option {
	return optionFunc(func(c *config) { c.contentType = ct })
}

// MeterOption is both an Option and a HandleOption.
type MeterOption interface {
	Option
	HandleOption
}

type meterOption struct{ mp metric.MeterProvider }

func (o meterOption) apply(c *config)             { c.mp = o.mp }
func (o meterOption) applyHandle(c *handleConfig) { c.mp = o.mp }

// WithMeterProvider sets where the instruments of a Publisher, Handle or
// WithClaimCheck are created (see MetricStored). The default is the global
// provider (otel.GetMeterProvider). A nil mp keeps the default.
func WithMeterProvider(mp metric.MeterProvider) MeterOption { return meterOption{mp: mp} }

// DeleteOnDone makes Handle delete the object once its message was acked
// (the handler returned Done and the ack reached the broker). It is for a
// command with one consumer: a message fanned out to several queues, or
// one that may be replayed later, must keep its object until it expires.
func DeleteOnDone() HandleOption {
	return handleOptionFunc(func(c *handleConfig) { c.deleteOnDone = true })
}

func newConfig(opts []Option) (config, error) {
	c := config{expiry: DefaultExpiry(acemq.RetryPolicy{}), contentType: "application/octet-stream"}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if len(c.errs) > 0 {
		return c, fmt.Errorf("blob: %w", errors.Join(c.errs...))
	}
	return c, nil
}

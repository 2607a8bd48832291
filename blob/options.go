package blob

import (
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq"
	"go.opentelemetry.io/otel/metric"
)

// Option configures a Publisher, Put or WithClaimCheck.
type Option interface {
	apply(*config)
	ClaimCheckOption
}

// HandleOption configures Handle.
type HandleOption interface{ applyHandle(*handleConfig) }

// ClaimCheckOption configures WithClaimCheck: every Option does, and
// DeleteOnDone.
type ClaimCheckOption interface{ applyClaimCheck(*claimConfig) }

// claimConfig is WithClaimCheck's configuration: the objects' and its
// own.
type claimConfig struct {
	config
	deleteOnDone bool
}

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

func (f optionFunc) apply(c *config)                { f(c) }
func (f optionFunc) applyClaimCheck(c *claimConfig) { f(&c.config) }

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

func (o meterOption) apply(c *config)                { c.mp = o.mp }
func (o meterOption) applyHandle(c *handleConfig)    { c.mp = o.mp }
func (o meterOption) applyClaimCheck(c *claimConfig) { c.mp = o.mp }

// WithMeterProvider sets where the instruments of a Publisher, Handle or
// WithClaimCheck are created (see MetricStored). The default is the global
// provider (otel.GetMeterProvider). A nil mp keeps the default.
func WithMeterProvider(mp metric.MeterProvider) MeterOption { return meterOption{mp: mp} }

// DoneOption is both a HandleOption and a ClaimCheckOption.
type DoneOption interface {
	HandleOption
	ClaimCheckOption
}

type deleteOnDone struct{}

func (deleteOnDone) applyHandle(c *handleConfig)    { c.deleteOnDone = true }
func (deleteOnDone) applyClaimCheck(c *claimConfig) { c.deleteOnDone = true }

// DeleteOnDone deletes a message's object once the message was acked:
// its handler returned Done and the ack was sent to the broker; never
// after a failure, a retry, a dead letter or a park, so a message that
// can still be retried or replayed keeps its object. Given to Handle, it
// deletes the streamed object; given to WithClaimCheck, it makes the
// Conn's consumers delete each claim-checked body they loaded.
//
// It is for a command with one consumer. A message fanned out to several
// queues (an exchange with more than one binding) carries one claim to
// every queue: the first consumer's ack would delete the object the
// others still have to load, and they would dead-letter their copies as
// gone. Without it, an object stays until its expiry and a Sweep.
func DeleteOnDone() DoneOption { return deleteOnDone{} }

// newClaimConfig is newConfig for WithClaimCheck.
func newClaimConfig(opts []ClaimCheckOption) (claimConfig, error) {
	c := claimConfig{config: defaultConfig()}
	for _, o := range opts {
		if o != nil {
			o.applyClaimCheck(&c)
		}
	}
	if len(c.errs) > 0 {
		return c, fmt.Errorf("blob: %w", errors.Join(c.errs...))
	}
	return c, nil
}

func defaultConfig() config {
	return config{expiry: DefaultExpiry(acemq.RetryPolicy{}), contentType: "application/octet-stream"}
}

func newConfig(opts []Option) (config, error) {
	c := defaultConfig()
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

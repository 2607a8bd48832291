package acemq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

	"github.com/acemq/acemq/internal/wire"
	"github.com/acemq/acemq/transport"
	"go.opentelemetry.io/otel/metric"
)

// ConnOption configures a Conn. Options are fixed for the life of the Conn.
type ConnOption interface{ applyConn(*connConfig) }

type connOptionFunc func(*connConfig)

func (f connOptionFunc) applyConn(c *connConfig) { f(c) }

type connConfig struct {
	transport     transport.Transport
	publishChain  []PublishInterceptor
	consumeChain  []ConsumeInterceptor
	codec         Codec
	codecs        codecSet
	origin        string
	policy        RetryPolicy
	meterProvider metric.MeterProvider
	logger        *slog.Logger
	tls           *tls.Config
	onSettled     []func(context.Context, Settlement)
	confirmWindow int
	quorumQueues  bool
	bodyStore     BodyStore // claimcheck.go
	offloadAbove  int
	maxMessage    int
	cipher        BodyCipher // cipher.go
	errs          []error
}

func (c *connConfig) fail(err error) { c.errs = append(c.errs, err) }

var errNilInterceptor = errors.New("acemq: the interceptor is nil")

// WithTransport makes the Conn use t, whatever the URL's scheme says. The
// Conn closes t when it closes.
func WithTransport(t transport.Transport) ConnOption {
	return connOptionFunc(func(c *connConfig) {
		if t == nil {
			c.fail(errors.New("acemq: WithTransport was given a nil transport"))
			return
		}
		c.transport = t
	})
}

// WithPublishInterceptor appends ic to the publish chain. Interceptors run in
// the order they were given. A nil ic fails Connect.
func WithPublishInterceptor(ic PublishInterceptor) ConnOption {
	return connOptionFunc(func(c *connConfig) {
		if ic == nil {
			c.fail(errNilInterceptor)
			return
		}
		c.publishChain = append(c.publishChain, ic)
	})
}

// WithConsumeInterceptor appends ic to the consume chain. Interceptors run
// in the order they were given. A nil ic fails Connect.
func WithConsumeInterceptor(ic ConsumeInterceptor) ConnOption {
	return connOptionFunc(func(c *connConfig) {
		if ic == nil {
			c.fail(errNilInterceptor)
			return
		}
		c.consumeChain = append(c.consumeChain, ic)
	})
}

// WithCodec makes codec the one the Conn publishes with (default JSON) and
// adds it to the codecs its consumers choose from by content type (as a
// media type: parameters and case do not matter). Given several times, the
// last publishes, and decodes deliveries that carry no content type, and
// all decode their own.
func WithCodec(codec Codec) ConnOption {
	return connOptionFunc(func(c *connConfig) {
		if codec == nil || codec.ContentType() == "" {
			c.fail(errors.New("acemq: WithCodec was given a nil codec or one without a content type"))
			return
		}
		c.codec = codec
		c.codecs.add(codec)
		c.codecs[""] = codec
	})
}

// WithOrigin sets the Origin stamped on every message this Conn publishes
// first. The default is <executable>@<hostname>. An empty origin, or one
// over 255 bytes (what AMQP's app-id holds), fails Connect.
func WithOrigin(origin string) ConnOption {
	return connOptionFunc(func(c *connConfig) {
		switch {
		case origin == "":
			c.fail(errors.New("acemq: WithOrigin was given an empty origin (leave it out for the default, <executable>@<hostname>)"))
		case len(origin) > wire.MaxShortString:
			c.fail(fmt.Errorf("acemq: WithOrigin was given an origin of %d bytes; an origin has at most %d", len(origin), wire.MaxShortString))
		default:
			c.origin = origin
		}
	})
}

// WithRetryPolicy sets the retry ladder of every consumer on the Conn that
// does not set its own with WithConsumerRetry. The default is DefaultRetryPolicy.
func WithRetryPolicy(p RetryPolicy) ConnOption {
	return connOptionFunc(func(c *connConfig) {
		p, err := p.normalize()
		if err != nil {
			c.fail(fmt.Errorf("acemq: %w", err))
			return
		}
		c.policy = p
	})
}

// WithMeterProvider sets where the engine's instruments are created. The
// default is the global provider (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) ConnOption {
	return connOptionFunc(func(c *connConfig) {
		if mp == nil {
			c.fail(errors.New("acemq: WithMeterProvider was given nil"))
			return
		}
		c.meterProvider = mp
	})
}

// WithLogger sets the logger the Conn and its transport write to. The
// default is slog.Default().
func WithLogger(l *slog.Logger) ConnOption {
	return connOptionFunc(func(c *connConfig) {
		if l == nil {
			c.fail(errors.New("acemq: WithLogger was given nil"))
			return
		}
		c.logger = l
	})
}

// WithTLS sets the TLS configuration for amqps:// URLs. Without it, or
// given nil, amqps:// uses the system's roots and the URL's host name.
func WithTLS(cfg *tls.Config) ConnOption {
	return connOptionFunc(func(c *connConfig) { c.tls = cfg })
}

// WithConfirmWindow bounds the publishes the RabbitMQ transport holds at
// once, queued for a channel or written and awaiting the broker's confirm,
// across all of the Conn's publishers. When n are outstanding, a further
// Send or PublishRaw waits for room, up to its ctx: this is what keeps
// memory bounded when the broker stalls or blocks publishing.
//
// The default is 1024 (rabbitmq.DefaultConfirmWindow), enough to keep
// pipelined publishes at the broker's rate. 1 makes every publish wait for
// the one before it to be confirmed; values below 1 fail Connect. The
// memory transport, and a transport given with WithTransport, ignore it.
func WithConfirmWindow(n int) ConnOption {
	return connOptionFunc(func(c *connConfig) {
		if n < 1 {
			c.fail(fmt.Errorf("acemq: WithConfirmWindow was given %d; want 1 or more", n))
			return
		}
		c.confirmWindow = n
	})
}

// WithQuorumQueues makes every queue the Conn's consumers declare a quorum
// queue, as if each had been given Quorum: the queue, its retry tiers, its
// .dlq and its .parked. It is the setting for a cluster, where a classic
// queue lives on one node and is gone while that node is (docs/cluster.md).
// A queue that already exists as a classic queue cannot become a quorum
// queue in place; NewConsumer then fails saying so.
func WithQuorumQueues() ConnOption {
	return connOptionFunc(func(c *connConfig) { c.quorumQueues = true })
}

// OnSettled registers fn to run after every delivery any consumer of the
// Conn settles, refusals and parking included, on the worker that settled
// it. It may be given several times; all run, in the order given, after the
// delivery's metrics are recorded and its WhenSettled callbacks have run.
func OnSettled(fn func(context.Context, Settlement)) ConnOption {
	return connOptionFunc(func(c *connConfig) {
		if fn == nil {
			c.fail(errors.New("acemq: OnSettled was given a nil function"))
			return
		}
		c.onSettled = append(c.onSettled, fn)
	})
}

package acemq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/acemq/acemq/internal/urls"
	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
	"go.opentelemetry.io/otel"
)

// Connect connects to the broker url names and returns a Conn.
//
//   - amqp:// and amqps:// connect to RabbitMQ. A comma-separated list of
//     them names the nodes of one cluster
//     ("amqp://u:p@node1:5672/,amqp://u:p@node2:5672/"): the Conn connects
//     to one node and, when it loses it, moves to the next that answers
//     (docs/cluster.md). A password that holds a comma needs no escaping.
//   - memory://NAME joins the in-process broker NAME; memory:// alone gets a
//     fresh one. Conns with the same NAME in one process share a broker.
//
// Connect dials eagerly and waits for the broker: while a node refuses the
// connection or cannot be reached it tries again, with capped backoff,
// until ctx ends, so a service may start before its broker. What no retry
// fixes fails at once: a login or vhost the broker refuses, a TLS
// certificate that does not verify, a URL that does not parse. When ctx
// ends first, the error wraps ctx's error and says what the last attempt
// met. Passwords never appear in an error. WithTransport overrides the
// scheme.
func Connect(ctx context.Context, rawURL string, opts ...ConnOption) (*Conn, error) {
	cfg := connConfig{
		codec:  JSON,
		codecs: codecSet{JSON.ContentType(): JSON, "": JSON},
		policy: DefaultRetryPolicy(),
	}
	for _, o := range opts {
		if o == nil {
			cfg.fail(errors.New("acemq: Connect was given a nil option"))
			continue
		}
		o.applyConn(&cfg)
	}
	if len(cfg.errs) > 0 {
		if cfg.transport != nil {
			_ = cfg.transport.Close()
		}
		return nil, errors.Join(cfg.errs...)
	}
	if cfg.meterProvider == nil {
		cfg.meterProvider = otel.GetMeterProvider()
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.origin == "" {
		cfg.origin = defaultOrigin()
	}
	if cfg.transport == nil {
		t, err := dial(ctx, rawURL, &cfg)
		if err != nil {
			return nil, err
		}
		cfg.transport = t
	}
	c, err := newConn(cfg)
	if err != nil {
		return nil, err
	}
	c.watchDelays(ctx)
	return c, nil
}

// dial picks a transport by the URL's scheme. A comma-separated list names
// the nodes of one RabbitMQ cluster, whose entries the RabbitMQ transport
// checks; only a memory:// entry among them, which that transport would call
// merely "not amqp://", is named here.
func dial(ctx context.Context, rawURL string, cfg *connConfig) (transport.Transport, error) {
	if entries := urls.Split(rawURL); len(entries) > 1 {
		for i, e := range entries {
			if urls.Scheme(e) == "memory" {
				return nil, fmt.Errorf("acemq: entry %d of the URL list %s is a memory:// URL, which cannot be mixed with RabbitMQ nodes", i+1, Redact(rawURL))
			}
		}
		return dialRabbitMQ(ctx, rawURL, cfg)
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("acemq: %q is not a URL (want amqp://, amqps:// or memory://)", Redact(rawURL))
	}
	switch strings.ToLower(scheme) {
	case "memory":
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("acemq: connecting: %w", err)
		}
		return memory.New(strings.TrimSuffix(rest, "/")), nil
	case "amqp", "amqps":
		return dialRabbitMQ(ctx, rawURL, cfg)
	}
	return nil, fmt.Errorf("acemq: unsupported URL scheme %q (want amqp, amqps or memory)", scheme)
}

// Redact returns rawURL, one URL or a comma-separated list of them, with
// every password replaced by "xxxxx" and the rest as given, for errors and
// logs: "amqp://user:s3cret@host/" becomes "amqp://user:xxxxx@host/". An
// entry that does not parse is redacted by position. Redact never fails.
func Redact(rawURL string) string { return urls.Redact(rawURL) }

func defaultOrigin() string {
	exe := "acemq"
	if p, err := os.Executable(); err == nil {
		exe = filepath.Base(p)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return exe + "@" + host
}

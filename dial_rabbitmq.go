package acemq

import (
	"context"
	"fmt"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// dialRabbitMQ connects the RabbitMQ transport with the Conn's TLS
// configuration, logger and confirm window. The transport's errors carry
// the URL with its password redacted; Connect's wraps them.
func dialRabbitMQ(ctx context.Context, rawURL string, cfg *connConfig) (transport.Transport, error) {
	t, err := rabbitmq.Dial(ctx, rawURL, rabbitmq.Config{
		TLS:            cfg.tls,
		Logger:         cfg.logger,
		ConnectionName: cfg.origin,
		ConfirmWindow:  cfg.confirmWindow,
	})
	if err != nil {
		return nil, fmt.Errorf("acemq: connecting: %w", err)
	}
	return t, nil
}

package acemq

import (
	"context"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/rabbitmq"
)

// dialRabbitMQ connects the RabbitMQ transport with the Conn's TLS
// configuration, logger and confirm window. The transport's errors carry
// the URL with its password redacted.
func dialRabbitMQ(ctx context.Context, rawURL string, cfg *connConfig) (transport.Transport, error) {
	return rabbitmq.Dial(ctx, rawURL, rabbitmq.Config{
		TLS:            cfg.tls,
		Logger:         cfg.logger,
		ConnectionName: cfg.origin,
		ConfirmWindow:  cfg.confirmWindow,
	})
}

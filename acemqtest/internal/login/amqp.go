package login

import (
	"context"
	"errors"
	"net"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq/internal/urls"
)

// AMQP opens and closes an AMQP connection to rawURL, all within ctx.
func AMQP(ctx context.Context, rawURL string) error {
	conn, err := DialAMQP(ctx, rawURL)
	if err != nil {
		return err
	}
	return conn.Close()
}

// DialAMQP connects to rawURL, or to the first node of a URL list that
// accepts, all within ctx. Its errors carry no password.
func DialAMQP(ctx context.Context, rawURL string) (*amqp.Connection, error) {
	var errs []error
	for _, u := range urls.Split(rawURL) {
		conn, err := amqp.DialConfig(u, amqp.Config{
			Dial: func(network, addr string) (net.Conn, error) {
				return Dial(ctx, network, addr)
			},
		})
		if err == nil {
			return conn, nil
		}
		errs = append(errs, errors.New(urls.Scrub(err.Error(), u)))
	}
	return nil, errors.Join(errs...)
}

// Dial connects to addr within ctx, and gives the connection ctx's
// deadline, if any, so that what is said on it ends by then too.
func Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	return c, nil
}

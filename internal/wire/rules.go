package wire

import (
	"fmt"
	"reflect"

	"github.com/acemq/acemq/transport"
)

// The broker's rules for what a declaration or a publish may carry, in one
// place. Both transports run them in Declare and Publish, and the engine in
// Send, so that whatever a transport accepts RabbitMQ accepts too: a short
// string over 255 bytes makes amqp091-go's writer fail and take the whole
// connection down, and an argument table that cannot be encoded would
// leave the declaration without its arguments. Each reason names the field
// and the limit; it carries no "acemq: " prefix, so callers wrap it once.

// CheckShortString reports s, the value of field, when it is longer than
// an AMQP short string holds ([MaxShortString] bytes).
func CheckShortString(field, s string) error {
	if len(s) > MaxShortString {
		return fmt.Errorf("the %s is %d bytes, more than the %d AMQP allows", field, len(s), MaxShortString)
	}
	return nil
}

// CheckArgs reports the first reason an argument table (a queue's or an
// exchange's) cannot travel: more than [MaxEntries] arguments, a name
// longer than [MaxShortString] bytes, or a value [CheckValue] refuses.
func CheckArgs(args map[string]any) error {
	if len(args) > MaxEntries {
		return fmt.Errorf("%d arguments, more than the %d an AMQP table holds", len(args), MaxEntries)
	}
	for k, v := range args {
		if len(k) > MaxShortString {
			return fmt.Errorf("an argument name of %d bytes, more than the %d AMQP allows", len(k), MaxShortString)
		}
		if err := CheckValue(v, 0); err != nil {
			return fmt.Errorf("argument %s: %w", k, err)
		}
	}
	return nil
}

// CheckMessage reports the first reason m cannot be published: an
// exchange, a routing key or a property longer than an AMQP short string,
// or a header table [CheckHeaders] refuses (up to [MaxEntries] headers).
func CheckMessage(m transport.Message) error {
	for _, f := range [...]struct{ name, value string }{
		{"exchange name", m.Exchange}, {"routing key", m.RoutingKey},
		{"content type", m.ContentType}, {"message ID", m.MessageID},
		{"correlation ID", m.CorrelationID}, {"type", m.Type},
		{"app ID", m.AppID}, {"reply-to", m.ReplyTo},
	} {
		if err := CheckShortString(f.name, f.value); err != nil {
			return err
		}
	}
	if err := CheckHeaders(m.Headers, MaxEntries); err != nil {
		return fmt.Errorf("headers: %w", err)
	}
	return nil
}

// CheckTopology reports the first reason the broker would refuse or
// mangle the declaration of it: a name or key longer than an AMQP short
// string, or an argument table [CheckArgs] refuses. Pointers to the
// topology types are checked as their values; other types pass, for the
// transport to refuse as it sees fit.
func CheckTopology(it transport.Topology) error {
	switch v := it.(type) {
	case *transport.Exchange:
		if v != nil {
			return CheckTopology(*v)
		}
	case *transport.Queue:
		if v != nil {
			return CheckTopology(*v)
		}
	case *transport.Binding:
		if v != nil {
			return CheckTopology(*v)
		}
	case *transport.ExchangeBinding:
		if v != nil {
			return CheckTopology(*v)
		}
	case transport.Exchange:
		return firstOf(CheckShortString("exchange name", v.Name), argsError(v.Args))
	case transport.Queue:
		return firstOf(CheckShortString("queue name", v.Name), argsError(v.Args))
	case transport.Binding:
		return firstOf(
			CheckShortString("exchange name", v.Exchange),
			CheckShortString("binding key", v.Key),
			CheckShortString("queue name", v.Queue))
	case transport.ExchangeBinding:
		return firstOf(
			CheckShortString("source exchange name", v.Source),
			CheckShortString("binding key", v.Key),
			CheckShortString("destination exchange name", v.Destination))
	}
	return nil
}

func argsError(args map[string]any) error {
	if err := CheckArgs(args); err != nil {
		return fmt.Errorf("arguments: %w", err)
	}
	return nil
}

func firstOf(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Describe names a topology item for an error: its kind and its names,
// each shortened by [Clip].
func Describe(it transport.Topology) string {
	switch v := it.(type) {
	case transport.Exchange:
		return fmt.Sprintf("exchange %q", Clip(v.Name))
	case transport.Queue:
		return fmt.Sprintf("queue %q", Clip(v.Name))
	case transport.Binding:
		return fmt.Sprintf("binding of queue %q to exchange %q", Clip(v.Queue), Clip(v.Exchange))
	case transport.ExchangeBinding:
		return fmt.Sprintf("binding of exchange %q to exchange %q", Clip(v.Destination), Clip(v.Source))
	case *transport.Exchange, *transport.Queue, *transport.Binding, *transport.ExchangeBinding:
		if p := reflect.ValueOf(it); !p.IsNil() {
			return Describe(p.Elem().Interface().(transport.Topology))
		}
	}
	return fmt.Sprintf("%T", it)
}

// Clip shortens a name longer than an AMQP short string to its first 64
// bytes and "...", so that an error about its length stays readable.
func Clip(s string) string {
	if len(s) <= MaxShortString {
		return s
	}
	return s[:64] + "..."
}

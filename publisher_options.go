package acemq

import (
	"errors"
	"fmt"
)

// PublisherOption configures a Publisher.
type PublisherOption interface{ applyPublisher(*publisherConfig) }

type publisherOptionFunc func(*publisherConfig)

func (f publisherOptionFunc) applyPublisher(c *publisherConfig) { f(c) }

type publisherConfig struct {
	typeName    string
	version     int
	contentType string
	keyBy       any    // a func(T) string, from KeyBy
	keyByType   string // the T KeyBy was given for, for the error
}

// TypeName names a message type instead of T's name (e.g. "OrderPlaced",
// the default). Given to NewPublisher it sets Envelope.Type of the
// publisher's messages; given to Route, it is the type the route takes. One
// value serves as both options.
func TypeName(name string) interface {
	PublisherOption
	RouteOption
} {
	return typeNameOption(name)
}

type typeNameOption string

func (o typeNameOption) applyPublisher(c *publisherConfig) { c.typeName = string(o) }
func (o typeNameOption) applyRoute(c *routeConfig)         { c.typeName = string(o) }

// SchemaVersion sets Envelope.Version for the publisher's messages. The
// default is 1; values below 1 are treated as 1.
func SchemaVersion(v int) PublisherOption {
	return publisherOptionFunc(func(c *publisherConfig) {
		if v >= 1 {
			c.version = v
		}
	})
}

// ContentType sets the content type of a Publisher[Raw]'s messages (default
// application/octet-stream). For other publishers the Conn's codec decides
// and this option is ignored.
func ContentType(ct string) PublisherOption {
	return publisherOptionFunc(func(c *publisherConfig) { c.contentType = ct })
}

// KeyBy gives each message of a Publisher[T] the ordering key fn returns
// for its payload (Envelope.Key; see Ordered), in Send and in SendAll. A
// Key given to one Send wins over it, and a publish interceptor may still
// change it. fn must be for the publisher's own T: given to a publisher of
// another type, every Send fails with an error naming both types. An empty
// key leaves the message without one.
func KeyBy[T any](fn func(T) string) PublisherOption {
	return publisherOptionFunc(func(c *publisherConfig) {
		if fn == nil {
			c.keyBy, c.keyByType = nil, ""
			return
		}
		c.keyBy, c.keyByType = fn, goTypeName[T]()
	})
}

// SendOption configures one Send.
type SendOption interface{ applySend(*sendConfig) }

type sendOptionFunc func(*sendConfig)

func (f sendOptionFunc) applySend(c *sendConfig) { f(c) }

type sendConfig struct {
	headers       map[string]any
	reserved      map[string]any
	id            string
	correlationID string
	causationID   string
	key           string
	errs          []error
}

// Header sets an application header on the message. A name in the reserved
// x-acemq- namespace, or a value an AMQP table cannot carry, makes Send fail.
func Header(name string, value any) SendOption {
	return sendOptionFunc(func(c *sendConfig) {
		if name == "" {
			c.errs = append(c.errs, errors.New("acemq: Header was given an empty name"))
			return
		}
		if isReserved(name) {
			c.errs = append(c.errs, fmt.Errorf("acemq: header %q is in the reserved namespace %s, which belongs to the engine; use a prefix of your own", name, ReservedPrefix))
			return
		}
		if err := checkHeaderValue(name, value); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		if c.headers == nil {
			c.headers = make(map[string]any)
		}
		c.headers[name] = value
	})
}

// MessageID sets Envelope.ID instead of a new UUIDv7; the id a broker and a
// consumer see, and the default idempotency key.
func MessageID(id string) SendOption {
	return sendOptionFunc(func(c *sendConfig) { c.id = id })
}

// CorrelationID sets Envelope.CorrelationID. Inside a handler it defaults to
// the incoming message's CorrelationID, or its ID when that is empty.
func CorrelationID(id string) SendOption {
	return sendOptionFunc(func(c *sendConfig) { c.correlationID = id })
}

// CausationID sets Envelope.CausationID. Inside a handler it defaults to the
// incoming message's ID.
func CausationID(id string) SendOption {
	return sendOptionFunc(func(c *sendConfig) { c.causationID = id })
}

// Key sets the message's ordering key, Envelope.Key: an ordered consumer
// (see Ordered) handles the messages of one key one at a time, in the order
// they were sent. It travels as the header x-acemq-key. A key is at most
// 255 bytes of UTF-8; a longer one, or one that is not UTF-8, makes Send
// fail. The empty key is no key.
func Key(k string) SendOption {
	return sendOptionFunc(func(c *sendConfig) { c.key = k })
}

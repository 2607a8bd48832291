package acemq

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/acemq/acemq/internal/wire"
)

// PublisherOption configures a Publisher.
type PublisherOption interface{ applyPublisher(*publisherConfig) }

type publisherOptionFunc func(*publisherConfig)

func (f publisherOptionFunc) applyPublisher(c *publisherConfig) { f(c) }

type publisherConfig struct {
	typeName    string
	version     int
	contentType string
	keyBy       any    // a func(T) string, from KeyBy; checkPublisher types it
	keyByType   string // the T KeyBy was given for, for the error
	// errs are the options' complaints, without a prefix: checkPublisher
	// returns them joined under "acemq: the publisher of T was given ".
	errs []error
}

// checkPublisher finishes the configuration of a publisher of T (a
// Publisher[Raw] when raw) once its options ran: it returns KeyBy's
// function as the func(T) string it must be, and the error every Send of
// the publisher returns when an option was invalid or misplaced (nil when
// none was). NewPublisher returns no error, so this is where its options
// fail: at every Send, as SPEC §16 says of a KeyBy for another type.
func checkPublisher[T any](c *publisherConfig) (func(T) string, error) {
	var keyBy func(T) string
	if c.keyBy != nil {
		fn, ok := c.keyBy.(func(T) string)
		if !ok {
			c.errs = append(c.errs, fmt.Errorf("KeyBy for %s: KeyBy's function must take the publisher's type", c.keyByType))
		}
		keyBy = fn
	}
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("acemq: the publisher of %s was given %w", goTypeName[T](), errors.Join(c.errs...))
	}
	return keyBy, nil
}

// TypeName names a message type instead of T's name (e.g. "OrderPlaced",
// the default; a Publisher[Raw] writes none by default). Given to
// NewPublisher it sets Envelope.Type of the publisher's messages; given to
// Route, it is the type the route takes. One value serves as both options.
// An empty name, or one over 255 bytes (what AMQP's type property holds),
// fails every Send of the publisher, and makes Route's route invalid.
func TypeName(name string) interface {
	PublisherOption
	RouteOption
} {
	return typeNameOption(name)
}

type typeNameOption string

func (o typeNameOption) applyPublisher(c *publisherConfig) {
	switch {
	case o == "":
		c.errs = append(c.errs, errors.New("an empty TypeName"))
	case len(o) > wire.MaxShortString:
		c.errs = append(c.errs, fmt.Errorf("a TypeName of %d bytes; a type has at most %d", len(o), wire.MaxShortString))
	default:
		c.typeName = string(o)
	}
}

func (o typeNameOption) applyRoute(c *routeConfig) { c.typeName = string(o) }

// SchemaVersion sets Envelope.Version for the publisher's messages. The
// default is 1; v outside 1 to 2147483647 (what the version header
// carries) fails every Send of the publisher.
func SchemaVersion(v int) PublisherOption {
	return publisherOptionFunc(func(c *publisherConfig) {
		if v < 1 || v > math.MaxInt32 {
			c.errs = append(c.errs, fmt.Errorf("SchemaVersion(%d): want 1 to %d", v, math.MaxInt32))
			return
		}
		c.version = v
	})
}

// ContentType sets the content type of a Publisher[Raw]'s messages (default
// application/octet-stream). Other publishers write their Conn's codec's
// (WithCodec) and ignore it, with a warning when NewPublisher runs. An
// empty content type, or one over 255 bytes, fails every Send of the
// publisher.
func ContentType(ct string) PublisherOption {
	return publisherOptionFunc(func(c *publisherConfig) {
		switch {
		case ct == "":
			c.errs = append(c.errs, errors.New("an empty ContentType"))
		case len(ct) > wire.MaxShortString:
			c.errs = append(c.errs, fmt.Errorf("a ContentType of %d bytes; a content type has at most %d", len(ct), wire.MaxShortString))
		default:
			c.contentType = ct
		}
	})
}

// KeyBy gives each message of a Publisher[T] the ordering key fn returns
// for its payload (Envelope.Key; see Ordered), in Send and in SendAll. A
// Key given to one Send wins over it, and a publish interceptor may still
// change it. By default a message has no key but the one Key gives. fn
// must be for the publisher's own T: NewPublisher checks it once, and
// given to a publisher of another type, or nil, it fails every Send of the
// publisher with an error naming both types. An empty key leaves the
// message without one.
func KeyBy[T any](fn func(T) string) PublisherOption {
	return publisherOptionFunc(func(c *publisherConfig) {
		if fn == nil {
			c.errs = append(c.errs, fmt.Errorf("a nil KeyBy for %s", goTypeName[T]()))
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
	due           time.Time // After's or At's; zero sends at once
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

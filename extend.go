package acemq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
)

// This file is what a package extending acemq builds on: acemq's own
// patterns, otel and outbox use exactly these, and a user's package may do
// the same. Send options that carry a value of the extension's own
// (SendKey), a per-message context in SendAll (PerMessage), reserved
// x-acemq- headers beyond the envelope's fields (ReservedHeader,
// Envelope.Reserved, Envelope.SetReserved) and the Conn's logger
// (Conn.Logger).

// A SendKey names a value of type V that a SendOption carries to whoever
// reads a Send's options, not to the engine: a plain Publisher ignores
// it. It is how a package that wraps or stands in for a Publisher gives
// its own options the same shape as acemq's, so they mix in one list; the
// outbox's At and After, which schedule a row its Publisher writes, are
// such options. Keys compare by identity: make each one once, with
// NewSendKey, in a package-level variable.
type SendKey[V any] struct{ name string }

// NewSendKey returns a new key; name is only for reading (String), two keys
// with the same name are still different keys.
func NewSendKey[V any](name string) *SendKey[V] { return &SendKey[V]{name: name} }

// String returns the name the key was made with.
func (k *SendKey[V]) String() string { return k.name }

// Option returns a SendOption that carries v under k.
func (k *SendKey[V]) Option(v V) SendOption { return keyedOption[V]{key: k, value: v} }

// Value returns the value of the last option in opts that carries one
// under k, and whether there was one.
func (k *SendKey[V]) Value(opts []SendOption) (V, bool) {
	var (
		v     V
		found bool
	)
	for _, o := range opts {
		if ko, ok := o.(keyedOption[V]); ok && ko.key == k {
			v, found = ko.value, true
		}
	}
	return v, found
}

// keyedOption is the option SendKey.Option makes; the engine ignores it.
type keyedOption[V any] struct {
	key   *SendKey[V]
	value V
}

func (keyedOption[V]) applySend(*sendConfig) {}

// PerMessage returns a SendOption that gives each message of a Send or a
// SendAll a context of its own, and tells the caller how it ended: for a
// span, a log line or a deadline per message rather than per batch, on
// SendAll's pipelined path (one Send after another would lose it). For
// each message, start runs with the Send's ctx before the message's
// publish chain and codec, which then run with the context start returns;
// the function start returns is called exactly once, with the message's ID
// (empty when it had none yet) and error, when the message's result is
// known. Only the last PerMessage option counts. otel.Publisher opens its
// producer spans with it. Publisher.Prepare ignores it.
func PerMessage(start func(ctx context.Context) (context.Context, func(id string, err error))) SendOption {
	return perMessageOption{start: start}
}

// perMessageOption is the option PerMessage makes; SendAll reads it.
type perMessageOption struct{ start perMessage }

func (perMessageOption) applySend(*sendConfig) {}

// perMessage gives one message of a SendAll its own context and learns its
// result (see PerMessage).
type perMessage func(ctx context.Context) (context.Context, func(id string, err error))

// perMessageOf returns the last PerMessage option of opts, or nil.
func perMessageOf(opts []SendOption) perMessage {
	var pm perMessage
	for _, o := range opts {
		if p, ok := o.(perMessageOption); ok && p.start != nil {
			pm = p.start
		}
	}
	return pm
}

// ReservedHeader sets the reserved header name, under ReservedPrefix, on
// the message sent. The namespace is the engine's: Header refuses it, so
// that an application cannot forge or drop what the engine and the
// packages extending it keep there. ReservedHeader is for such a package:
// patterns.Itinerary carries its routing slip in x-acemq-itinerary with
// it, and a consumer reads it back with Envelope.Reserved. Send fails when
// name is not under ReservedPrefix, when it is the header of an Envelope
// field (x-acemq-attempt, x-acemq-key and the others Envelope documents:
// set the field instead), or when value is not one an AMQP table carries.
func ReservedHeader(name string, value any) SendOption {
	return sendOptionFunc(func(c *sendConfig) {
		if err := checkReserved(name, value); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		if c.reserved == nil {
			c.reserved = make(map[string]any)
		}
		c.reserved[name] = value
	})
}

// checkReserved says why name and value cannot be a reserved header of an
// envelope besides its fields, or nil.
func checkReserved(name string, value any) error {
	switch {
	case !isReserved(name):
		return fmt.Errorf("acemq: reserved header %q is outside the namespace %s", name, ReservedPrefix)
	case isFieldHeader(name):
		return fmt.Errorf("acemq: reserved header %q stands for an Envelope field; set the field instead", name)
	}
	return checkHeaderValue(name, value)
}

// Reserved returns a copy of the reserved x-acemq- headers e carries
// besides the ones its fields stand for (a routing slip's, say, or one a
// newer engine wrote, or CipherHeader on a sealed message), or nil when
// there are none. A consumer reads what ReservedHeader set with it; a
// package that stores envelopes (the outbox)
// keeps them with it, so that a message published later carries them too.
// A nil e gives nil.
func (e *Envelope) Reserved() map[string]any {
	if e == nil || len(e.reserved) == 0 && e.cipherKey == "" {
		return nil
	}
	m := maps.Clone(e.reserved)
	if e.cipherKey != "" {
		if m == nil {
			m = make(map[string]any, 1)
		}
		m[CipherHeader] = e.cipherKey
	}
	return m
}

// SetReserved sets the reserved header name on e, as ReservedHeader does on
// a message sent, for the same packages: one that stores an envelope
// restores its reserved headers with it before publishing it with
// Conn.PublishRaw. It fails, and changes nothing, on what ReservedHeader
// refuses.
func (e *Envelope) SetReserved(name string, value any) error {
	if e == nil {
		return errors.New("acemq: SetReserved on a nil Envelope")
	}
	if err := checkReserved(name, value); err != nil {
		return err
	}
	if strings.EqualFold(name, CipherHeader) {
		// A key ID the envelope keeps in a field of its own (cipher.go).
		e.cipherKey = ""
		return readString(name, value, &e.cipherKey)
	}
	if e.reserved == nil {
		e.reserved = make(map[string]any)
	}
	e.reserved[name] = value
	return nil
}

// Logger returns the logger the Conn writes to: WithLogger's, or
// slog.Default() at Connect. Code that runs beside a Conn, such as the
// outbox's Relay or a worker of the application's own, logs with it to be
// read where the Conn's own lines are.
// A nil Conn gives slog.Default().
func (c *Conn) Logger() *slog.Logger {
	if c == nil || c.cfg.logger == nil {
		return slog.Default()
	}
	return c.cfg.logger
}

// SetFence gives m the partition and fencing token an ordered consumer
// stamps on its deliveries (see Message.Fence and Message.Partition): for
// code that builds Messages itself, such as a test that hands a handler a
// delivery of a stale holder to see its write refused. A partition below 0
// makes m unordered again (Partition -1, Fence 0).
func (m *Message[T]) SetFence(partition int, fence uint64) {
	if partition < 0 {
		m.part, m.fence = 0, 0
		return
	}
	m.part, m.fence = partition+1, fence
}

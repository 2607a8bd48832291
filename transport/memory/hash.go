package memory

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/acemq/acemq/transport"
)

// kindConsistentHash is the exchange kind of RabbitMQ's
// rabbitmq_consistent_hash_exchange plugin.
const kindConsistentHash = "x-consistent-hash"

// What a consistent-hash exchange hashes, picked from its arguments as the
// plugin does: a header (hash-header), a property (hash-property:
// message_id, correlation_id or timestamp), or else the routing key.
const (
	hashRoutingKey = iota
	hashHeader
	hashProperty
)

// hashOn is what a consistent-hash exchange hashes.
type hashOn struct {
	from int
	name string // the header or property
}

// parseHashArgs reads a consistent-hash exchange's arguments, refusing what
// RabbitMQ 3.10's plugin refuses.
func parseHashArgs(name string, args map[string]any) (hashOn, error) {
	h, hasH := args["hash-header"]
	p, hasP := args["hash-property"]
	switch {
	case hasH && hasP:
		return hashOn{}, fmt.Errorf("memory: exchange %q: hash-header and hash-property are mutually exclusive", name)
	case hasH:
		s, ok := h.(string)
		if !ok || s == "" {
			return hashOn{}, fmt.Errorf("memory: exchange %q: argument hash-header is %v (%T), want a header name", name, h, h)
		}
		return hashOn{from: hashHeader, name: s}, nil
	case hasP:
		s, _ := p.(string)
		switch s {
		case "message_id", "correlation_id", "timestamp":
			return hashOn{from: hashProperty, name: s}, nil
		}
		return hashOn{}, fmt.Errorf("memory: exchange %q: argument hash-property is %v, want message_id, correlation_id or timestamp", name, p)
	}
	return hashOn{from: hashRoutingKey}, nil
}

// parseWeight reads the binding key of a binding to a consistent-hash
// exchange: the destination's weight, a positive integer in decimal.
func parseWeight(exchange, key string) (int, error) {
	w, err := strconv.Atoi(key)
	switch {
	case err != nil:
		return 0, fmt.Errorf("memory: binding to x-consistent-hash exchange %q: the binding key %q must be an integer (the destination's weight)", exchange, key)
	case w < 1:
		return 0, fmt.Errorf("memory: binding to x-consistent-hash exchange %q: the binding key %q must be greater than 0", exchange, key)
	case w > maxWeight:
		return 0, fmt.Errorf("memory: binding to x-consistent-hash exchange %q: the weight %d is over %d", exchange, w, maxWeight)
	}
	return w, nil
}

// maxWeight bounds one binding's weight, so a typo cannot make the ring
// take gigabytes.
const maxWeight = 1 << 16

// ringLocked returns ex's buckets: each bound destination repeated by its
// weight, in binding order, a destination bound twice counting once (its
// first binding), as in the plugin's bucket map. It is rebuilt after a
// binding changes.
func (ex *exchange) ringLocked() []binding {
	if ex.ring != nil || len(ex.bindings) == 0 {
		return ex.ring
	}
	ring := make([]binding, 0, len(ex.bindings))
	for i, bd := range ex.bindings {
		dup := false
		for _, prev := range ex.bindings[:i] {
			if prev.q == bd.q && prev.x == bd.x {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		w, _ := strconv.Atoi(bd.key) // checked when bound
		for range w {
			ring = append(ring, bd)
		}
	}
	ex.ring = ring
	return ring
}

// pickLocked returns the binding ex routes m to, or false when nothing is
// bound.
func (ex *exchange) pickLocked(m *transport.Message) (binding, bool) {
	ring := ex.ringLocked()
	if len(ring) == 0 {
		return binding{}, false
	}
	h, ok := ex.hashLocked(m)
	if !ok {
		// The plugin hashes the absent value (Erlang's undefined) to a
		// bucket that depends on the bucket count only; here it is bucket 0,
		// the first destination bound.
		return ring[0], true
	}
	return ring[jumpHash(h, len(ring))], true
}

// hashLocked returns the hash of the value ex hashes for m, or false when m
// lacks it. The properties and the routing key hash as hashOf hashes a string
// or an integer, without boxing them: this runs for every message.
func (ex *exchange) hashLocked(m *transport.Message) (uint64, bool) {
	switch ex.hash.from {
	case hashHeader:
		v, ok := m.Headers[ex.hash.name]
		if !ok || v == nil {
			return 0, false
		}
		return hashOf(v), true
	case hashProperty:
		switch ex.hash.name {
		case "message_id":
			return fnv64a(fnvOffset, m.MessageID), m.MessageID != ""
		case "correlation_id":
			return fnv64a(fnvOffset, m.CorrelationID), m.CorrelationID != ""
		default:
			return hashInt(m.Timestamp.Unix()), !m.Timestamp.IsZero()
		}
	}
	return fnv64a(fnvOffset, m.RoutingKey), true
}

// hashOf returns a 64-bit FNV-1a hash of a header value. Strings and byte
// slices hash by their bytes; integers of any width, and other values, by a
// typed rendering, so that 7 and "7" land apart as they do on RabbitMQ.
func hashOf(v any) uint64 {
	switch x := v.(type) {
	case string:
		return fnv64a(fnvOffset, x)
	case []byte:
		return fnv64a(fnvOffset, x)
	case time.Time:
		h := fnv.New64a()
		_, _ = fmt.Fprintf(h, "\x00t%d", x.Unix())
		return h.Sum64()
	}
	if n, ok := integer(v); ok {
		return hashInt(n)
	}
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "\x00%T%v", v, v)
	return h.Sum64()
}

// hashInt returns hashOf of an integer: the FNV-1a hash of 'i' and its eight
// bytes, big-endian.
func hashInt(n int64) uint64 {
	var b [9]byte
	b[0] = 'i'
	binary.BigEndian.PutUint64(b[1:], uint64(n))
	return fnv64a(fnvOffset, b[:])
}

// The 64-bit FNV-1a parameters, as in hash/fnv.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnv64a adds the bytes of s to the 64-bit FNV-1a hash h, as hash/fnv's
// Write does, without a hasher on the heap.
func fnv64a[T string | []byte](h uint64, s T) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// integer returns v as an int64 when it is an integer of any Go type.
func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	}
	return 0, false
}

// jumpHash is Lamping and Veach's jump consistent hash ("A Fast, Minimal
// Memory, Consistent Hash Algorithm", 2014), the algorithm the plugin uses:
// it maps key to one of n buckets, and moves only 1/n of the keys when a
// bucket is added at the end.
func jumpHash(key uint64, n int) int {
	var b, j int64 = -1, 0
	for j < int64(n) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

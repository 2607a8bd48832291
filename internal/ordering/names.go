package ordering

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// The headers ordering reads and writes. HeaderKey and HeaderError are the
// envelope's (x-acemq-key, x-acemq-error); the others are ordering's own.
const (
	HeaderKey       = "x-acemq-key"
	HeaderError     = "x-acemq-error"
	HeaderControl   = "x-acemq-control"
	hdrBlockedID    = "x-acemq-blocked-id"
	hdrBlockedSince = "x-acemq-blocked-since"
	hdrPartition    = "x-acemq-partition"
	hdrQuorum       = "x-acemq-quorum"
	hdrRerun        = "x-acemq-rerun"
	controlRelease  = "release"
)

// PartitionQueue is the name of partition i of an ordered queue:
// "orders.p0".
func PartitionQueue(queue string, i int) string { return fmt.Sprintf("%s.p%d", queue, i) }

// MembersQueue is the queue every instance of an ordered consumer
// subscribes to, so that its consumer count is the number of instances.
func MembersQueue(queue string) string { return queue + ".members" }

// FenceCounter is the fencing counter of an ordered queue
// (transport.Fencer): one for all its partitions, taken from each time an
// instance becomes a partition's active consumer. On RabbitMQ it is a
// stream queue of that name.
func FenceCounter(queue string) string { return queue + ".fence" }

// BlockedQueue is the blocked-key registry of an ordered queue.
func BlockedQueue(queue string) string { return queue + ".blocked" }

// blockedLock is the lease the registry is read and written under.
func blockedLock(queue string) string { return queue + ".blocked.lock" }

// HeldQueue is where the messages of a blocked key wait for ReleaseKey.
func HeldQueue(queue, key string) string { return queue + ".held." + keyHash(key) }

// RerunQueue is where ReleaseKey with a re-run puts the message that
// blocked key, for the holder of its partition to run before the held ones.
func RerunQueue(queue, key string) string { return queue + ".rerun." + keyHash(key) }

// keyHash names a key's held queue: the first 16 hex digits of its
// SHA-256, so any key (up to 255 bytes of UTF-8) makes a short, plain name.
func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// KeyOf returns the ordering key in a delivery's headers, or "".
func KeyOf(h map[string]any) string {
	switch k := h[HeaderKey].(type) {
	case string:
		return k
	case []byte:
		return string(k)
	}
	return ""
}

// isControl reports whether a delivery is a control message (a release).
func isControl(h map[string]any) bool {
	_, ok := h[HeaderControl]
	return ok
}

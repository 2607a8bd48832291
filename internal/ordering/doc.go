// Package ordering is the machinery of acemq's ordered consumers (SPEC
// §16): the spreader that shares an ordered queue's partitions among the
// instances consuming it, the blocked-key registry the broker keeps for
// BlockOnFailure, the lanes that run the messages of one key one at a
// time, and the statuses each instance publishes for acemq stats. It works over the transport alone; what a delivery is and how it
// settles is the root package's, which it reaches through Host.
//
// Its errors carry no prefix: they reach the user through package acemq,
// which adds its own.
package ordering

import (
	"log/slog"

	"github.com/acemq/acemq/transport"
)

// Broker is the transport an ordered queue runs on, with the optional
// interfaces it needs resolved once by the caller: nil when the transport
// has none.
type Broker struct {
	T        transport.Transport
	Leaser   transport.Leaser
	HandOver transport.HandOverConsumer
	Fencer   transport.Fencer   // nil: deliveries carry fence 0
	Liveness transport.Liveness // nil: never taken to be cut off
	Log      *slog.Logger
}

func (b Broker) logger() *slog.Logger {
	if b.Log == nil {
		return slog.Default()
	}
	return b.Log
}

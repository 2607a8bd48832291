package rabbitmq

import "sync"

// keyHeader is the header that carries a message's ordering key (SPEC §16:
// the root's Envelope.Key). The transport keeps one publisher's messages of
// a key in order on their way to the broker; see keyLanes.
const keyHeader = "x-acemq-key"

// laneID names a key's lane: the same key on another exchange routes
// elsewhere and is another lane.
type laneID struct{ exchange, key string }

// lane is one key's publishes from the moment the transport took them
// until their outcome, in the order they were handed over.
//
// The broker keeps a channel's publishes to one queue in order, so a key's
// publishes may be pipelined on one channel; what may not happen is a
// publish reaching the broker ahead of an earlier one of its key whose fate
// is unknown: sent on another channel while the earlier one is in flight,
// sent while the earlier one waits to be sent again after its channel died
// or the broker nacked it, or sent on a channel before the broker
// acknowledged a publish of the key there (RabbitMQ 3.10 refuses the first
// publishes on a channel to a quorum queue whose leader is being elected,
// and may take the next ones).
//
// Invariants, under keyLanes.mu: the flying publishes are all on channel
// on; a publish is written only when every publish before it in pending is
// flying and none after it is (pending[flying] is it), and either nothing
// is flying or the broker acked a publish of the lane on that same channel
// (acked, which a nack on it clears).
type lane struct {
	id      laneID
	pending []*pubReq // taken, not completed, in the order taken
	flying  int       // how many of pending are written and unconfirmed
	on      *pubChannel
	acked   bool
}

// keyLanes holds the lanes of the keys with a publish not yet completed;
// a lane goes once its last publish completes.
type keyLanes struct {
	mu    sync.Mutex
	lanes map[laneID]*lane
	free  []*lane // lanes gone, kept for reuse (a key's lane usually lives for one publish)
}

// maxFreeLanes bounds keyLanes.free: as many as the default confirm
// window has publishes, each of which may be a lane of its own.
const maxFreeLanes = DefaultConfirmWindow

// laneOf returns the lane ID of a publish that carries an ordering key.
func laneOf(exchange string, headers map[string]any) (laneID, bool) {
	k, ok := headers[keyHeader].(string)
	if !ok || k == "" {
		return laneID{}, false
	}
	return laneID{exchange, k}, true
}

// admit puts a keyed r at the end of its key's lane. The caller holds r's
// window token and hands r to the writers only afterwards, so the lane's
// order is the order of the calls.
func (k *keyLanes) admit(r *pubReq) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lanes == nil {
		k.lanes = make(map[laneID]*lane)
	}
	l := k.lanes[r.laneID]
	if l == nil {
		if n := len(k.free); n > 0 {
			l = k.free[n-1]
			k.free = k.free[:n-1]
			l.id = r.laneID
		} else {
			l = &lane{id: r.laneID}
		}
		k.lanes[r.laneID] = l
	}
	l.pending = append(l.pending, r)
	r.lane = l
}

// fly decides, for a writer holding pc's write lock, whether r may be
// written on pc now: if so it counts r as flying on pc, and the caller
// writes it (or calls land when it cannot). If not, r is held in its lane
// until the publishes before it allow it (see release), and the caller
// drops it: the lane owns it meanwhile.
func (k *keyLanes) fly(r *pubReq, pc *pubChannel) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := r.lane
	ok := l.flying < len(l.pending) && l.pending[l.flying] == r &&
		(l.flying == 0 || (l.on == pc && l.acked))
	if !ok {
		r.held = true
		return false
	}
	if l.on != pc {
		l.on, l.acked = pc, false
	}
	l.flying++
	r.flying = true
	return true
}

// land records that r, counted flying on pc, is no longer in flight: its
// confirm came (acked tells which) or its channel lost it. It returns the
// publishes this lets go, for the caller to queue (see requeueAll).
func (k *keyLanes) land(r *pubReq, pc *pubChannel, confirmed, acked bool) []*pubReq {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := r.lane
	if !r.flying {
		return nil
	}
	r.flying = false
	l.flying--
	if confirmed && l.on == pc {
		// A nack means the broker may take the lane's next publish on pc
		// while refusing this one: pc is trusted no more (it is being
		// replaced anyway).
		l.acked = acked
	}
	return l.releaseLocked()
}

// leave removes a completed r from its lane and returns the publishes this
// lets go.
func (k *keyLanes) leave(r *pubReq) []*pubReq {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := r.lane
	r.lane = nil
	for i, p := range l.pending {
		if p != r {
			continue
		}
		switch {
		case len(l.pending) == 1:
			l.pending[0] = nil
			l.pending = l.pending[:0] // keeps its room for the next
		case i == 0:
			l.pending[0] = nil        // no body kept alive by the array
			l.pending = l.pending[1:] // the usual case: no copy
		default:
			last := len(l.pending) - 1
			copy(l.pending[i:], l.pending[i+1:])
			l.pending[last] = nil
			l.pending = l.pending[:last]
		}
		break
	}
	if r.flying {
		// Completed in flight (the transport closing): no longer counted.
		r.flying = false
		l.flying--
	}
	if len(l.pending) == 0 {
		delete(k.lanes, l.id)
		if len(k.free) < maxFreeLanes {
			*l = lane{pending: l.pending[:0]}
			k.free = append(k.free, l)
		}
		return nil
	}
	return l.releaseLocked()
}

// releaseLocked returns the held publishes of l that may go now: the one
// next in line when the lane allows a write, with the held ones right
// behind it (queued in order, each is checked again by fly). k.mu is held.
func (l *lane) releaseLocked() []*pubReq {
	if l.flying >= len(l.pending) || !l.pending[l.flying].held || (l.flying > 0 && !l.acked) {
		return nil
	}
	var out []*pubReq
	for _, p := range l.pending[l.flying:] {
		if !p.held {
			break
		}
		p.held = false
		out = append(out, p)
	}
	return out
}

// sweep takes every held publish out of its lane's hold, for Close to fail.
func (k *keyLanes) sweep() []*pubReq {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []*pubReq
	for _, l := range k.lanes {
		for _, p := range l.pending {
			if p.held {
				p.held = false
				out = append(out, p)
			}
		}
	}
	return out
}

// land is keyLanes.land for any publish that left pc's flight, queuing
// what it lets go; unkeyed publishes have nothing to do.
func (t *Transport) land(r *pubReq, pc *pubChannel, confirmed, acked bool) {
	if r.lane != nil {
		t.requeueAll(t.keys.land(r, pc, confirmed, acked))
	}
}

// requeueAll hands publishes a lane let go back to the writers.
func (t *Transport) requeueAll(rs []*pubReq) {
	for _, r := range rs {
		t.requeue(t.reqs, r, errConnectionLost)
	}
}

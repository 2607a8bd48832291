package rabbitmq

import (
	"context"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func amqpPublishing(i int) amqp.Publishing { return amqp.Publishing{MessageId: fmt.Sprintf("m%d", i)} }

// laneReqs admits n publishes of one key, m1 … mn, to a fresh keyLanes.
func laneReqs(t *testing.T, n int) (*keyLanes, []*pubReq) {
	t.Helper()
	k := &keyLanes{}
	rs := make([]*pubReq, n+1) // rs[i] is m_i; rs[0] is unused
	for i := 1; i <= n; i++ {
		id, ok := laneOf("orders", map[string]any{keyHeader: "order-7"})
		if !ok {
			t.Fatal("laneOf found no key in x-acemq-key")
		}
		rs[i] = &pubReq{ctx: context.Background(), laneID: id, keyed: true, msg: amqpPublishing(i)}
		k.admit(rs[i])
	}
	return k, rs
}

// idsOf lists the publishes by their message IDs, as text.
func idsOf(rs []*pubReq) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.msg.MessageId)
	}
	return fmt.Sprint(out)
}

// wantFly fails unless fly answers want for r on pc.
func wantFly(t *testing.T, k *keyLanes, r *pubReq, pc *pubChannel, want bool, why string) {
	t.Helper()
	if got := k.fly(r, pc); got != want {
		t.Fatalf("%s: fly(%s) = %v, want %v", why, r.msg.MessageId, got, want)
	}
}

// TestLaneChannelDiesWithKeyInFlight forces the order a node's death
// makes: m1 and m2 of a key in flight on a channel that dies, m3 already
// queued behind them. On the next channel m3 comes to the writer first; it
// is held, m1 goes, m2 waits for m1's ack there, and then m2 and m3 follow
// in order.
func TestLaneChannelDiesWithKeyInFlight(t *testing.T) {
	k, m := laneReqs(t, 3)
	old, next := &pubChannel{}, &pubChannel{}
	wantFly(t, k, m[1], old, true, "the key's first publish")
	wantFly(t, k, m[2], old, false, "m2 before the channel acked anything of the key")
	k.land(m[1], old, true, true)
	if got := k.leave(m[1]); idsOf(got) != "[m2]" {
		t.Fatalf("m1 acked: released %s, want [m2]", idsOf(got))
	}
	// m1 was the first; now a second round: m2 and m3 in flight at once.
	wantFly(t, k, m[2], old, true, "m2 once the channel acked m1")
	wantFly(t, k, m[3], old, true, "m3 pipelined behind m2 on the same channel")
	// The channel dies with both in flight; a fourth publish was queued.
	m4 := &pubReq{ctx: context.Background(), laneID: m[1].laneID, keyed: true, msg: amqpPublishing(4)}
	k.admit(m4)
	for _, r := range []*pubReq{m[2], m[3]} {
		if got := k.land(r, old, false, false); got != nil {
			t.Fatalf("landing %s released %s", r.msg.MessageId, idsOf(got))
		}
	}
	wantFly(t, k, m4, next, false, "m4, queued before the resends, on the next channel")
	wantFly(t, k, m[3], next, false, "m3 ahead of m2's resend")
	wantFly(t, k, m[2], next, true, "m2, the first whose fate is unknown")
	wantFly(t, k, m[3], next, false, "m3 before the next channel acked m2")
	k.land(m[2], next, true, true)
	if got := k.leave(m[2]); idsOf(got) != "[m3 m4]" {
		t.Fatalf("m2 acked on the next channel: released %s, want [m3 m4]", idsOf(got))
	}
	wantFly(t, k, m[3], next, true, "m3 after m2's ack")
	wantFly(t, k, m4, next, true, "m4 behind m3")
}

// TestLaneNackedWithLaterAcked: the broker nacks a key's first publish on
// a channel (a quorum queue electing its leader) and might take the next:
// the next was never written, since a key's first publish on a channel
// goes alone; it is written only after m1's resend, on another channel.
func TestLaneNackedWithLaterAcked(t *testing.T) {
	k, m := laneReqs(t, 2)
	first, second := &pubChannel{}, &pubChannel{}
	wantFly(t, k, m[1], first, true, "m1")
	wantFly(t, k, m[2], first, false, "m2 while m1 awaits the first ack of the key")
	if got := k.land(m[1], first, true, false); got != nil {
		t.Fatalf("m1 nacked: released %s, want nothing (m1 goes first)", idsOf(got))
	}
	wantFly(t, k, m[1], second, true, "m1 sent again")
	k.land(m[1], second, true, true)
	if got := k.leave(m[1]); idsOf(got) != "[m2]" {
		t.Fatalf("m1 acked: released %s, want [m2]", idsOf(got))
	}
	wantFly(t, k, m[2], second, true, "m2 after m1")
}

// TestLaneNackAmongPipelined: a nack of m1 while m2 is in flight behind it
// on the same channel stops the pipeline there: m1 waits until m2's fate
// is known, and then goes before m2's own resend.
func TestLaneNackAmongPipelined(t *testing.T) {
	k, m := laneReqs(t, 3)
	pc, fresh := &pubChannel{}, &pubChannel{}
	// m0 acked earlier on pc: the key pipelines there.
	wantFly(t, k, m[1], pc, true, "m1")
	k.land(m[1], pc, true, true)
	k.leave(m[1])
	wantFly(t, k, m[2], pc, true, "m2")
	wantFly(t, k, m[3], pc, true, "m3")
	k.land(m[2], pc, true, false) // nacked
	wantFly(t, k, m[2], fresh, false, "m2's resend while m3 is in flight on the channel that nacked")
	if got := k.land(m[3], pc, false, false); idsOf(got) != "[m2]" {
		t.Fatalf("m3 lost with its channel: released %s, want [m2]", idsOf(got))
	}
	wantFly(t, k, m[3], fresh, false, "m3 before m2")
	wantFly(t, k, m[2], fresh, true, "m2 first")
}

// TestLaneTwoChannels: with two publishing channels a key stays on one
// until its publishes in flight there are confirmed.
func TestLaneTwoChannels(t *testing.T) {
	k, m := laneReqs(t, 3)
	a, b := &pubChannel{}, &pubChannel{}
	wantFly(t, k, m[1], a, true, "m1 on a")
	k.land(m[1], a, true, true)
	k.leave(m[1])
	wantFly(t, k, m[2], a, true, "m2 on a")
	wantFly(t, k, m[3], b, false, "m3 on b while m2 is in flight on a")
	k.land(m[2], a, true, true)
	if got := k.leave(m[2]); idsOf(got) != "[m3]" {
		t.Fatalf("m2 acked: released %s, want [m3]", idsOf(got))
	}
	wantFly(t, k, m[3], b, true, "m3 on b once nothing of the key is in flight")
	k.land(m[3], b, true, true)
	k.leave(m[3])
	if len(k.lanes) != 0 {
		t.Errorf("%d lanes left once every publish completed", len(k.lanes))
	}
}

// TestLaneOf: only a non-empty string in x-acemq-key is a key, and the
// exchange is part of the lane.
func TestLaneOf(t *testing.T) {
	for _, h := range []map[string]any{nil, {}, {keyHeader: ""}, {keyHeader: 7}, {"x-other": "k"}} {
		if _, ok := laneOf("x", h); ok {
			t.Errorf("laneOf(%v) found a key", h)
		}
	}
	a, _ := laneOf("x", map[string]any{keyHeader: "k"})
	b, _ := laneOf("y", map[string]any{keyHeader: "k"})
	if a == b {
		t.Error("one key on two exchanges is one lane")
	}
}

// BenchmarkLaneBookkeeping measures what a keyed publish adds to the
// publish path without a broker: admit, fly, land and leave, 1,024 at a
// time in flight as in a full confirm window, over 1,000 keys and over one.
func BenchmarkLaneBookkeeping(b *testing.B) {
	for _, keys := range []int{1000, 1} {
		b.Run(fmt.Sprintf("keys%d", keys), func(b *testing.B) {
			k := &keyLanes{}
			pc := &pubChannel{}
			const window = 1024
			rs := make([]*pubReq, window)
			for i := range rs {
				id, _ := laneOf("x", map[string]any{keyHeader: fmt.Sprintf("key-%d", i%keys)})
				rs[i] = &pubReq{ctx: context.Background(), laneID: id, keyed: true}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += window {
				n := min(window, b.N-done)
				for _, r := range rs[:n] {
					k.admit(r)
				}
				for _, r := range rs[:n] {
					if k.fly(r, pc) {
						continue
					}
					// Held behind the first of its key on the channel:
					// that one is acked, as the listener does, and the held
					// one goes.
					first := r.lane.pending[0]
					k.land(first, pc, true, true)
					k.leave(first)
					if !k.fly(r, pc) {
						b.Fatal("a released publish was held again")
					}
				}
				for _, r := range rs[:n] {
					if r.lane != nil {
						k.land(r, pc, true, true)
						k.leave(r)
					}
				}
			}
		})
	}
}

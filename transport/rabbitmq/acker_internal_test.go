package rabbitmq

import (
	"reflect"
	"testing"
)

func TestFlushCoalesces(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		prefetch int
		handed   []uint64
		settle   map[uint64]uint8
		want     []wireOp
		left     int
	}{
		{
			name:   "run of acks becomes one multiple ack",
			handed: []uint64{1, 2, 3, 4},
			settle: map[uint64]uint8{1: acked, 2: acked, 3: acked, 4: acked},
			want:   []wireOp{{tag: 4, state: acked, multiple: true}},
		},
		{
			name:   "a nack splits the run",
			handed: []uint64{1, 2, 3, 4},
			settle: map[uint64]uint8{1: acked, 2: requeued, 3: acked, 4: acked},
			want: []wireOp{
				{tag: 1, state: acked, multiple: true},
				{tag: 2, state: requeued, multiple: true},
				{tag: 4, state: acked, multiple: true},
			},
		},
		{
			name:   "a run of requeues becomes one multiple requeue; a dead-letter nack goes alone",
			handed: []uint64{1, 2, 3, 4, 5, 6},
			settle: map[uint64]uint8{1: requeued, 2: requeued, 3: nacked, 4: requeued, 5: requeued, 6: acked},
			want: []wireOp{
				{tag: 2, state: requeued, multiple: true},
				{tag: 3, state: nacked},
				{tag: 5, state: requeued, multiple: true},
				{tag: 6, state: acked, multiple: true},
			},
		},
		{
			name:   "after a release, requeues go singly",
			handed: []uint64{1, 2, 3},
			settle: map[uint64]uint8{1: released, 2: requeued, 3: requeued},
			want:   []wireOp{{tag: 2, state: requeued}, {tag: 3, state: requeued}},
		},
		{
			name:   "the run stops at the first unsettled",
			handed: []uint64{1, 2, 3, 4},
			settle: map[uint64]uint8{1: acked, 3: acked, 4: nacked},
			want:   []wireOp{{tag: 1, state: acked, multiple: true}},
			left:   3,
		},
		{
			name:     "too many waiting behind a slow one go singly",
			prefetch: 4,
			handed:   []uint64{5, 6, 7, 8},
			settle:   map[uint64]uint8{6: acked, 7: nacked, 8: acked},
			want:     []wireOp{{tag: 6, state: acked}, {tag: 7, state: nacked}, {tag: 8, state: acked}},
			left:     4,
		},
		{
			name:   "a released delivery is never sent nor covered by a multiple ack",
			handed: []uint64{1, 2, 3, 4, 5},
			settle: map[uint64]uint8{1: acked, 2: acked, 3: released, 4: acked, 5: acked},
			want: []wireOp{
				{tag: 2, state: acked, multiple: true},
				{tag: 4, state: acked},
				{tag: 5, state: acked},
			},
		},
		{
			name:     "released behind a slow one: later acks go singly",
			prefetch: 4,
			handed:   []uint64{1, 2, 3, 4},
			settle:   map[uint64]uint8{2: released, 3: acked, 4: acked},
			want:     []wireOp{{tag: 3, state: acked}, {tag: 4, state: acked}},
			left:     4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newConsumerChannel("q", nil, &session{done: make(chan struct{})}, max(tt.prefetch, 100))
			if tt.prefetch > 0 {
				c.spill = tt.prefetch / 2
			}
			for _, tag := range tt.handed {
				c.handOut(tag)
			}
			for _, tag := range tt.handed {
				if st, ok := tt.settle[tag]; ok {
					c.mu.Lock()
					c.entries[indexOf(c.entries, tag)].state = st
					c.open--
					c.mu.Unlock()
				}
			}
			got := c.plan()
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ops %+v; want %+v", got, tt.want)
			}
			if len(c.entries) != tt.left {
				t.Errorf("%d entries left; want %d", len(c.entries), tt.left)
			}
		})
	}
}

func indexOf(es []ackEntry, tag uint64) int {
	for i, e := range es {
		if e.tag == tag {
			return i
		}
	}
	return -1
}

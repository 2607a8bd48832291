package delay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
)

// counted is a transport whose queues hold the given counts; every other
// method is left unimplemented.
type counted struct {
	transport.Transport
	queues map[string]transport.QueueInfo
	fail   string
}

func (c counted) Inspect(_ context.Context, q string) (transport.QueueInfo, error) {
	if q == c.fail {
		return transport.QueueInfo{}, errors.New("channel closed")
	}
	info, ok := c.queues[q]
	if !ok {
		return transport.QueueInfo{}, transport.ErrNotFound
	}
	return info, nil
}

// topology is a delay topology whose queues hold the given counts.
func topology(counts map[string]int) map[string]transport.QueueInfo {
	qs := map[string]transport.QueueInfo{}
	for _, q := range Queues() {
		qs[q] = transport.QueueInfo{Name: q, Messages: counts[q]}
	}
	info := qs[DueQueue]
	info.Consumers = 2
	qs[DueQueue] = info
	return qs
}

func TestReadCountsBoundsTheSoonestByTheShortestLevel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		queues  map[string]transport.QueueInfo
		fail    string
		ok      bool
		want    Counts
		wantErr string
	}{
		{name: "no topology", queues: map[string]transport.QueueInfo{}, ok: false},
		{name: "nothing waits", queues: topology(nil), ok: true, want: Counts{Forwarders: 2, Soonest: -1}},
		{
			name:   "two levels, due and unroutable",
			queues: topology(map[string]int{LevelQueue(14): 3, LevelQueue(3): 1, DueQueue: 4, UnroutableQueue: 5}),
			ok:     true,
			want: Counts{
				Waiting: 4,
				Levels: []LevelCount{
					{Level: 3, Queue: "acemq.delay.level.03", TTL: time.Second, Messages: 1},
					{Level: 14, Queue: "acemq.delay.level.14", TTL: 2048 * time.Second, Messages: 3},
				},
				Due: 4, Forwarders: 2, Unroutable: 5, Soonest: 2*time.Second - Unit,
			},
		},
		{name: "a level cannot be read", queues: topology(nil), fail: LevelQueue(7), wantErr: "the delay topology: channel closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok, err := ReadCounts(t.Context(), counted{queues: tt.queues, fail: tt.fail})
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || ok != tt.ok {
				t.Fatalf("ok %v, err %v; want ok %v", ok, err, tt.ok)
			}
			if got.Waiting != tt.want.Waiting || got.Due != tt.want.Due || got.Forwarders != tt.want.Forwarders ||
				got.Unroutable != tt.want.Unroutable || got.Soonest != tt.want.Soonest || len(got.Levels) != len(tt.want.Levels) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got.Levels {
				if got.Levels[i] != tt.want.Levels[i] {
					t.Errorf("level %d: %+v, want %+v", i, got.Levels[i], tt.want.Levels[i])
				}
			}
		})
	}
}

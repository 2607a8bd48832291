package ordering

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq/transport"
	"github.com/acemq/acemq/transport/memory"
)

// TestReadStatus: ReadStatus keeps the latest status of each instance,
// leaves out one whose latest says it stopped, skips what is not a status,
// and gives every message back in order.
func TestReadStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr := memory.New(t.Name())
	defer tr.Close()
	const q = "orders"
	none, err := ReadStatus(ctx, tr, q)
	require.NoError(t, err)
	require.Empty(t, none, "no status queue: no instances")
	require.NoError(t, tr.Declare(ctx, StatusTopology(q)))
	now := time.Now().UTC()
	statuses := []Status{
		{Instance: "a", Partitions: []int{0, 1}, Unacked: map[int]int{0: 1, 1: 0}, Time: now.Add(-2 * time.Second)},
		{Instance: "b", Partitions: []int{2}, Unacked: map[int]int{2: 4}, Time: now.Add(-2 * time.Second)},
		{Instance: "a", Partitions: []int{0}, Unacked: map[int]int{0: 2}, Time: now},
		{Instance: "b", Time: now, Stopped: true},
	}
	var ids []string
	for i, s := range statuses {
		body, err := json.Marshal(s)
		require.NoError(t, err)
		id := string(rune('0' + i))
		ids = append(ids, id)
		require.NoError(t, tr.Publish(ctx, transport.Message{RoutingKey: StatusQueue(q), MessageID: id, Body: body}))
	}
	require.NoError(t, tr.Publish(ctx, transport.Message{RoutingKey: StatusQueue(q), MessageID: "junk", Body: []byte("not json")}))
	ids = append(ids, "junk")

	got, err := ReadStatus(ctx, tr, q)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "a", got[0].Instance)
	require.Equal(t, []int{0}, got[0].Partitions)
	require.Equal(t, map[int]int{0: 2}, got[0].Unacked)

	var back []string
	for {
		d, ok, err := tr.Get(ctx, StatusQueue(q))
		require.NoError(t, err)
		if !ok {
			break
		}
		back = append(back, d.MessageID)
		require.NoError(t, d.Ack())
	}
	require.Equal(t, ids, back, "every status given back, in order")
}

package console

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/internal/ordering"
	"github.com/acemq/acemq/transport"
)

// maxPartitions bounds the partitions looked for per ordered queue.
const maxPartitions = 1024

// Member is one queue of a family as the overview shows it.
type member struct {
	Name      string `json:"name"`
	Role      string `json:"role"` // work, dead letters, parked, retry after D, partition N
	Absent    bool   `json:"absent,omitempty"`
	Ready     int    `json:"ready"`
	Consumers int    `json:"consumers"`
	// Unacked and Active are known for an ordered queue's partitions only,
	// from its instances' statuses; Unacked is -1 when not known.
	Unacked int    `json:"unacked"`
	Active  string `json:"active,omitempty"`
}

// family is a work queue and the queues acemq derives from it.
type family struct {
	Queue     string   `json:"queue"`
	Ordered   bool     `json:"ordered"`
	Members   []member `json:"members"`
	Instances int      `json:"instances,omitempty"`
	Blocked   int      `json:"blocked,omitempty"`
	Err       string   `json:"error,omitempty"`
}

type overviewReply struct {
	Time       time.Time `json:"time"`
	Connection string    `json:"connection"` // "" when healthy
	Families   []family  `json:"families"`
	Delayed    delayed   `json:"delayed"`
	Note       string    `json:"note"`
}

// queueNames are the work queues the overview shows: Queues' and the
// Conn's consumers', sorted, each once.
func (c *console) queueNames(ctx context.Context) []string {
	names := slices.Clone(c.cfg.queues)
	rep := c.conn.HealthReport(ctx)
	for _, ch := range rep.Consumers {
		names = append(names, ch.Queue)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	out := overviewReply{Time: time.Now().UTC(), Families: []family{},
		Note: "retry tiers are looked for by the default retry policy's delays; unacked counts are known for an ordered queue's partitions only"}
	if rep := c.conn.HealthReport(ctx); rep.Connection != nil {
		out.Connection = rep.Connection.Error()
	}
	for _, q := range c.queueNames(ctx) {
		f, err := c.family(ctx, q)
		if err != nil {
			f.Err = err.Error()
		}
		out.Families = append(out.Families, f)
	}
	out.Delayed = c.delayedNow(ctx, out.Time)
	reply(w, out)
}

// family reads the counts of q's family, as acemq stats does.
func (c *console) family(ctx context.Context, q string) (family, error) {
	f := family{Queue: q, Members: []member{}}
	t := c.conn.Transport()
	ordered, err := orderedQueue(ctx, t, q)
	if err != nil {
		return f, err
	}
	f.Ordered = ordered
	var names []member
	if ordered {
		statuses, err := ordering.ReadStatus(ctx, t, q)
		if err != nil {
			return f, err
		}
		f.Instances = len(statuses)
		holder := map[int]ordering.Status{}
		for _, s := range statuses {
			for _, i := range s.Partitions {
				if old, ok := holder[i]; !ok || s.Time.After(old.Time) {
					holder[i] = s
				}
			}
		}
		for i := range maxPartitions {
			info, err := t.Inspect(ctx, acemq.PartitionQueue(q, i))
			if errors.Is(err, transport.ErrNotFound) {
				break
			}
			if err != nil {
				return f, err
			}
			m := member{Name: info.Name, Role: "partition " + strconv.Itoa(i), Ready: info.Messages, Consumers: info.Consumers, Unacked: -1}
			if s, ok := holder[i]; ok {
				m.Unacked, m.Active = s.Unacked[i], s.Instance
			}
			f.Members = append(f.Members, m)
		}
		if keys, err := acemq.BlockedKeys(ctx, c.conn, q); err == nil {
			f.Blocked = len(keys)
		}
	} else {
		names = append(names, member{Name: q, Role: "work"})
	}
	names = append(names, member{Name: acemq.DeadLetterQueue(q), Role: "dead letters"}, member{Name: acemq.ParkingQueue(q), Role: "parked"})
	if !ordered {
		for _, d := range acemq.DefaultRetryPolicy().Delays {
			names = append(names, member{Name: acemq.RetryQueue(q, d), Role: "retry after " + d.String()})
		}
	}
	for _, m := range names {
		m.Unacked = -1
		info, err := t.Inspect(ctx, m.Name)
		switch {
		case errors.Is(err, transport.ErrNotFound):
			m.Absent = true
		case err != nil:
			return f, err
		default:
			m.Ready, m.Consumers = info.Messages, info.Consumers
		}
		f.Members = append(f.Members, m)
	}
	return f, nil
}

// orderedQueue reports whether q is an ordered consumer's: no queue q, and
// a partition {q}.p0.
func orderedQueue(ctx context.Context, t transport.Transport, q string) (bool, error) {
	if _, err := t.Inspect(ctx, q); !errors.Is(err, transport.ErrNotFound) {
		return false, err
	}
	_, err := t.Inspect(ctx, acemq.PartitionQueue(q, 0))
	if errors.Is(err, transport.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

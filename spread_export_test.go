package acemq

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/acemq/acemq/internal/ordering"
)

// SpreaderForTest lets the black-box tests of spread_test.go drive
// internal/ordering's Spreader on a Conn, recording what it said last.
type SpreaderForTest struct {
	s    *ordering.Spreader
	mu   sync.Mutex
	held []int
}

// NewSpreaderForTest is ordering.NewSpreader on c's transport and logger,
// ticking about every period.
func NewSpreaderForTest(c *Conn, queue string, partitions int, period time.Duration) (*SpreaderForTest, error) {
	b := ordering.Broker{T: c.t, Leaser: c.caps.leaser, HandOver: c.caps.handOver, Log: c.cfg.logger}
	s, err := ordering.NewSpreader(b, queue, partitions, period)
	if err != nil {
		return nil, err
	}
	return &SpreaderForTest{s: s}, nil
}

// Run is the spreader's Run, recording each change for Held before
// onChange hears it.
func (x *SpreaderForTest) Run(ctx context.Context, onChange func(held []int)) error {
	return x.s.Run(ctx, func(held []int) {
		x.mu.Lock()
		x.held = slices.Clone(held)
		x.mu.Unlock()
		if onChange != nil {
			onChange(held)
		}
	})
}

// Held is what Run last said: the partitions held now, sorted; nil when
// Run is not running.
func (x *SpreaderForTest) Held() []int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.held)
}
